/* Pickle opcodes for the pickles ckptfs writes (protocol 2: the torch.save
 * archives' data.pkl, DCP's .metadata), into a ck_buf. */
#ifndef CK_PICKLE_W_H
#define CK_PICKLE_W_H

#include <stdint.h>

#include "../util/bytebuf.h"

void ck_pk_str(struct ck_buf *b, const char *s);			   /* BINUNICODE */
void ck_pk_global(struct ck_buf *b, const char *mod, const char *name); /* GLOBAL */
void ck_pk_int(struct ck_buf *b, uint64_t v); /* BININT1/2, BININT, LONG1 */

#endif
