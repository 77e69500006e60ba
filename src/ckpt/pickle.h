/* A restricted pickle reader that never executes anything: it runs the
 * opcodes Python 3.11 emits for protocols 2-5 (the set torch.save's pickles
 * use) and builds a tree of values. GLOBAL / STACK_GLOBAL become names,
 * REDUCE / NEWOBJ become call nodes (callable, arguments), BUILD is kept as
 * state beside its object, BINPERSID as a persistent-id node; the caller
 * pattern-matches the tree. Any other opcode is an error naming it and its
 * offset. Memory is bounded by the input: at most one node per two input
 * bytes (None, booleans and the empty tuple are shared, never copied), and
 * the memo and mark stack are bounded too. */
#ifndef CK_PICKLE_H
#define CK_PICKLE_H

#include <stddef.h>
#include <stdint.h>

#include "../util/error.h"

enum ck_pk_kind {
	CK_PK_NONE,
	CK_PK_BOOL,
	CK_PK_INT,
	CK_PK_FLOAT,
	CK_PK_STR,
	CK_PK_BYTES,
	CK_PK_TUPLE,
	CK_PK_LIST,
	CK_PK_DICT, /* items: key, value, key, value, ... */
	CK_PK_GLOBAL, /* s: "module", s2: "name" */
	CK_PK_CALL,   /* items[0]: the callable, items[1]: the argument tuple */
	CK_PK_PERSID, /* items[0]: the persistent id */
};

struct ck_pk {
	enum ck_pk_kind k;
	int64_t i;
	double f;
	char *s, *s2; /* strings and bytes are NUL-terminated; len excludes it */
	size_t len;
	struct ck_pk **items;
	size_t n, cap;
	struct ck_pk *state; /* BUILD's state, if any */
};

struct ck_pk_slab; /* nodes are allocated in slabs, freed together */

struct ck_pickle {
	struct ck_pk *root;
	struct ck_pk_slab *slabs;
	size_t n_nodes; /* at most len / 2 + 4096: real pickles make < 0.2 per byte */
};

int ck_pickle_parse(const unsigned char *buf, size_t len, const char *what, struct ck_pickle *out,
		    struct ck_err *err);
/* The same for a pickle followed by other data (the legacy torch.save
 * stream holds several back to back): *used gets the bytes up to and
 * including its STOP. */
int ck_pickle_parse_prefix(const unsigned char *buf, size_t len, const char *what,
			   struct ck_pickle *out, size_t *used, struct ck_err *err);
/* Call fn on every node of the pickle. */
void ck_pickle_each(const struct ck_pickle *p, void (*fn)(const struct ck_pk *, void *), void *ctx);
void ck_pickle_free(struct ck_pickle *p);
/* The callable's dotted name when n is a call of a GLOBAL ("torch._utils._rebuild_tensor_v2"
 * is module "torch._utils", name "_rebuild_tensor_v2"). */
int ck_pk_is_global(const struct ck_pk *n, const char *module, const char *name);

#endif
