/* Command-line verbs. Each returns the process exit status. */
#ifndef CK_CLI_H
#define CK_CLI_H

#include "../ckpt/catalog.h"
#include "../map/mapping.h"
#include "../plan/plan.h"
#include "../util/error.h"
#include "../util/size.h"
#include "../view/open.h"

int ck_cmd_inspect(int argc, char **argv);
extern const struct ck_cli_verb ck_verb_inspect;
int ck_cmd_convert(int argc, char **argv);
extern const struct ck_cli_verb ck_verb_convert;
int ck_cmd_mount(int argc, char **argv);
extern const struct ck_cli_verb ck_verb_mount;
int ck_cmd_diff(int argc, char **argv);
extern const struct ck_cli_verb ck_verb_diff;
int ck_cmd_check_mapping(int argc, char **argv);
extern const struct ck_cli_verb ck_verb_check_mapping;
/* Print "ckptfs: <message>" and return the exit status for err's kind. */
int ck_cli_report(const struct ck_err *err);
/* Allocator settings for large plans (heap.c); call first thing in main. */
void ck_heap_tune(void);
void ck_raise_fd_limit(void); /* soft RLIMIT_NOFILE to the hard one */

/* Consume argv[*i] (and its value) if it is one of struct ck_view_args's:
 * returns 1 (consumed), 0 (not ours) or -1 (bad value, err set). */
int ck_view_arg(struct ck_view_args *a, int argc, char **argv, int *i, struct ck_err *err);
int ck_cmd_mappings(int argc, char **argv);
extern const struct ck_cli_verb ck_verb_mappings;
struct ck_gguf_opts;
/* inspect --format gguf[:TYPE]: the GGUF view's metadata and tensors. */
int ck_inspect_gguf(const struct ck_view *v, const struct ck_gguf_opts *o, int json,
		    struct ck_err *err);
/* argv[0] is mount.fuse.ckptfs or mount.ckptfs: mount(8)'s helper protocol. */
int ck_mount_helper(int argc, char **argv);

#endif
