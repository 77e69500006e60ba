/* Command-line verbs. Each returns the process exit status. */
#ifndef CK_CLI_H
#define CK_CLI_H

#include "../util/error.h"

int ck_cmd_inspect(int argc, char **argv);
/* Print "ckptfs: <message>" and return the exit status for err's kind. */
int ck_cli_report(const struct ck_err *err);

#endif
