/* Writing JSON text: string escaping shared by every JSON the project emits. */
#ifndef CK_JSONW_H
#define CK_JSONW_H

#include <stdio.h>

/* Write s as a JSON string literal (quotes included). */
void ck_json_fput_str(FILE *f, const char *s);

#endif
