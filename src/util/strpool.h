/* Strings that live and die together (a checkpoint's tensor names), copied
 * into large blocks and freed by the block. A 100,000-key header's names
 * were 100,000 strdups on the parse's one thread and as many frees when
 * the catalog closed (4.5-10 ms of closing it); here they are a few dozen
 * of each, and the names lie side by side in the order they were read. */
#ifndef CK_STRPOOL_H
#define CK_STRPOOL_H

#include <stddef.h>

/* Blocks of 64 KiB: a few dozen for 100,000 names, one for a small
 * checkpoint's. A longer string gets a block of its own. */
#define CK_STRPOOL_BLOCK (64u << 10)

struct ck_strpool {
	char **blocks;
	size_t n, cap;
	char *at;    /* the next free byte of the newest block */
	size_t left; /* bytes free there */
};

/* A NUL-terminated copy of s[0, len) (len: s holds no NUL before it), which
 * lives until ck_strpool_free; NULL when out of memory (a, and every string
 * in it, unchanged). */
char *ck_strpool_add(struct ck_strpool *a, const char *s, size_t len);
/* Every block of from moves into to (from is left empty); the strings
 * stay where they are. 0, or -1 when out of memory (nothing moved). */
int ck_strpool_take(struct ck_strpool *to, struct ck_strpool *from);
/* Frees every string, and a's own arrays; a is left empty. */
void ck_strpool_free(struct ck_strpool *a);

#endif
