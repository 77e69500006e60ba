#include "pickle.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MEMO (1u << 24)
#define MAX_DEPTH (1u << 20) /* stack entries */

struct vm {
	const unsigned char *b;
	size_t len, pos;
	const char *what;
	struct ck_err *err;
	struct ck_pickle *p;
	struct ck_pk **stack;
	size_t sp, scap;
	size_t *marks;
	size_t nmarks, mcap;
	struct ck_pk **memo;
	size_t memo_cap, memo_count;
	size_t max_nodes;
	int over; /* the node budget ran out (err already says so) */
	struct ck_pk *none, *btrue, *bfalse, *empty_tuple;
};

static int fail(struct vm *v, const char *msg)
{
	return ck_fail(v->err, CK_E_SOURCE, "%s: pickle byte %zu: %s", v->what, v->pos, msg);
}

static int oom(struct vm *v)
{
	if (v->over) /* node() said why */
		return -1;
	return ck_fail_sys(v->err, ENOMEM, "%s: pickle", v->what);
}

#define SLAB_NODES 1024

struct ck_pk_slab {
	struct ck_pk_slab *next;
	size_t used;
	struct ck_pk n[SLAB_NODES];
};

static struct ck_pk *node(struct vm *v, enum ck_pk_kind k)
{
	struct ck_pickle *p = v->p;
	if (p->n_nodes >= v->max_nodes) {
		fail(v, "more values than the pickle's size allows (a hostile or corrupt pickle)");
		v->over = 1;
		return NULL;
	}
	struct ck_pk_slab *s = p->slabs;
	if (!s || s->used == SLAB_NODES) {
		if (!(s = malloc(sizeof *s)))
			return NULL;
		s->next = p->slabs;
		s->used = 0;
		p->slabs = s;
	}
	struct ck_pk *n = &s->n[s->used++];
	memset(n, 0, sizeof *n);
	n->k = k;
	p->n_nodes++;
	return n;
}

/* None, True, False and () carry nothing mutable: one node each */
static struct ck_pk *shared(struct vm *v, struct ck_pk **slot, enum ck_pk_kind k, int64_t i)
{
	if (!*slot && (*slot = node(v, k)))
		(*slot)->i = i;
	return *slot;
}

static int add_item(struct ck_pk *n, struct ck_pk *x)
{
	if (n->n == n->cap) {
		size_t c = n->cap ? 2 * n->cap : 4;
		struct ck_pk **ni = realloc(n->items, c * sizeof *ni);
		if (!ni)
			return -1;
		n->items = ni;
		n->cap = c;
	}
	n->items[n->n++] = x;
	return 0;
}

static int push(struct vm *v, struct ck_pk *n)
{
	if (!n)
		return v->over ? -1 : oom(v);
	if (v->sp == v->scap) {
		if (v->scap >= MAX_DEPTH)
			return fail(v, "stack too deep");
		size_t c = v->scap ? 2 * v->scap : 64;
		struct ck_pk **ns = realloc(v->stack, c * sizeof *ns);
		if (!ns)
			return oom(v);
		v->stack = ns;
		v->scap = c;
	}
	v->stack[v->sp++] = n;
	return 0;
}

static struct ck_pk *pop(struct vm *v)
{
	if (v->sp == 0 || (v->nmarks && v->sp == v->marks[v->nmarks - 1])) {
		fail(v, "stack underflow");
		return NULL;
	}
	return v->stack[--v->sp];
}

static int need(struct vm *v, size_t n)
{
	return n > v->len - v->pos ? fail(v, "truncated") : 0;
}

static uint64_t rd(struct vm *v, int n)
{
	uint64_t x = 0;
	for (int i = n - 1; i >= 0; i--)
		x = x << 8 | v->b[v->pos + (size_t)i];
	v->pos += (size_t)n;
	return x;
}

/* Pop everything above the last MARK into a new node of kind k. */
static int collect(struct vm *v, enum ck_pk_kind k, struct ck_pk **out)
{
	if (!v->nmarks)
		return fail(v, "no MARK");
	size_t m = v->marks[--v->nmarks];
	struct ck_pk *n = node(v, k);
	if (!n)
		return oom(v);
	for (size_t i = m; i < v->sp; i++)
		if (add_item(n, v->stack[i]) < 0)
			return oom(v);
	v->sp = m;
	*out = n;
	return 0;
}

static int str_node(struct vm *v, enum ck_pk_kind k, size_t n)
{
	if (need(v, n) < 0)
		return -1;
	struct ck_pk *s = node(v, k);
	if (!s || !(s->s = malloc(n + 1)))
		return oom(v);
	memcpy(s->s, v->b + v->pos, n);
	s->s[n] = '\0';
	s->len = n;
	v->pos += n;
	return push(v, s);
}

static int memo_put(struct vm *v, uint64_t i)
{
	if (!v->sp)
		return fail(v, "memo of an empty stack");
	if (i >= MAX_MEMO)
		return fail(v, "memo index too large");
	if (i >= v->memo_cap) {
		size_t c = v->memo_cap ? v->memo_cap : 64;
		while (c <= i)
			c *= 2;
		struct ck_pk **nm = realloc(v->memo, c * sizeof *nm);
		if (!nm)
			return oom(v);
		memset(nm + v->memo_cap, 0, (c - v->memo_cap) * sizeof *nm);
		v->memo = nm;
		v->memo_cap = c;
	}
	v->memo_count += !v->memo[i];
	v->memo[i] = v->stack[v->sp - 1];
	return 0;
}

static int memo_get(struct vm *v, uint64_t i)
{
	if (i >= v->memo_cap || !v->memo[i])
		return fail(v, "memo index not set");
	return push(v, v->memo[i]);
}

/* GLOBAL's "module\nname\n" */
static int read_line(struct vm *v, char **out)
{
	const unsigned char *nl = memchr(v->b + v->pos, '\n', v->len - v->pos);
	if (!nl)
		return fail(v, "truncated GLOBAL");
	size_t n = (size_t)(nl - (v->b + v->pos));
	if (!(*out = malloc(n + 1)))
		return oom(v);
	memcpy(*out, v->b + v->pos, n);
	(*out)[n] = '\0';
	v->pos += n + 1;
	return 0;
}

static int global(struct vm *v, char *mod, char *name)
{
	struct ck_pk *g = node(v, CK_PK_GLOBAL);
	if (!g) {
		free(mod);
		free(name);
		return oom(v);
	}
	g->s = mod;
	g->s2 = name;
	return push(v, g);
}

static int call(struct vm *v, struct ck_pk *fn, struct ck_pk *args)
{
	if (args->k != CK_PK_TUPLE)
		return fail(v, "call arguments are not a tuple");
	/* collections.OrderedDict() is a dict the SETITEMS that follow fill */
	if (ck_pk_is_global(fn, "collections", "OrderedDict") && args->n == 0)
		return push(v, node(v, CK_PK_DICT));
	struct ck_pk *c = node(v, CK_PK_CALL);
	if (!c || add_item(c, fn) < 0 || add_item(c, args) < 0)
		return oom(v);
	return push(v, c);
}

static int step(struct vm *v, int *stop)
{
	struct ck_pk *a, *b, *c, *n;
	int op = v->b[v->pos++];
	switch (op) {
	case 0x80: /* PROTO */
		if (need(v, 1) < 0)
			return -1;
		if (v->b[v->pos] < 2 || v->b[v->pos] > 5)
			return fail(v, "pickle protocol must be 2 to 5");
		v->pos++;
		return 0;
	case 0x95: /* FRAME: a length hint */
		if (need(v, 8) < 0)
			return -1;
		v->pos += 8;
		return 0;
	case 0x94: /* MEMOIZE: Python's memo[len(memo)] */
		return memo_put(v, v->memo_count);
	case 'q':
		return need(v, 1) < 0 ? -1 : memo_put(v, rd(v, 1));
	case 'r':
		return need(v, 4) < 0 ? -1 : memo_put(v, rd(v, 4));
	case 'h':
		return need(v, 1) < 0 ? -1 : memo_get(v, rd(v, 1));
	case 'j':
		return need(v, 4) < 0 ? -1 : memo_get(v, rd(v, 4));
	case 0x8c: /* SHORT_BINUNICODE */
		return need(v, 1) < 0 ? -1 : str_node(v, CK_PK_STR, (size_t)rd(v, 1));
	case 'X': /* BINUNICODE */
		return need(v, 4) < 0 ? -1 : str_node(v, CK_PK_STR, (size_t)rd(v, 4));
	case 'C': /* SHORT_BINBYTES */
		return need(v, 1) < 0 ? -1 : str_node(v, CK_PK_BYTES, (size_t)rd(v, 1));
	case 'B': /* BINBYTES */
		return need(v, 4) < 0 ? -1 : str_node(v, CK_PK_BYTES, (size_t)rd(v, 4));
	case 'c': { /* GLOBAL */
		char *mod, *name;
		if (read_line(v, &mod) < 0)
			return -1;
		if (read_line(v, &name) < 0) {
			free(mod);
			return -1;
		}
		return global(v, mod, name);
	}
	case 0x93: /* STACK_GLOBAL */
		if (!(b = pop(v)) || !(a = pop(v)))
			return -1;
		if (a->k != CK_PK_STR || b->k != CK_PK_STR)
			return fail(v, "STACK_GLOBAL of non-strings");
		{
			char *mod = strdup(a->s), *name = strdup(b->s);
			if (!mod || !name) {
				free(mod);
				free(name);
				return oom(v);
			}
			return global(v, mod, name);
		}
	case ')':
		return push(v, shared(v, &v->empty_tuple, CK_PK_TUPLE, 0));
	case ']':
		return push(v, node(v, CK_PK_LIST));
	case '}':
		return push(v, node(v, CK_PK_DICT));
	case '(': /* MARK */
		if (v->nmarks == v->mcap) {
			size_t c2 = v->mcap ? 2 * v->mcap : 16;
			if (c2 > MAX_DEPTH)
				return fail(v, "too many MARKs");
			size_t *nm = realloc(v->marks, c2 * sizeof *nm);
			if (!nm)
				return oom(v);
			v->marks = nm;
			v->mcap = c2;
		}
		v->marks[v->nmarks++] = v->sp;
		return 0;
	case 't':
		return collect(v, CK_PK_TUPLE, &n) < 0 ? -1 : push(v, n);
	case 0x85:
	case 0x86:
	case 0x87: { /* TUPLE1..3 */
		int k = op - 0x84;
		struct ck_pk *t = node(v, CK_PK_TUPLE), *x[3];
		if (!t)
			return oom(v);
		for (int i = k - 1; i >= 0; i--)
			if (!(x[i] = pop(v)))
				return -1;
		for (int i = 0; i < k; i++)
			if (add_item(t, x[i]) < 0)
				return oom(v);
		return push(v, t);
	}
	case 'R': /* REDUCE */
	case 0x81: /* NEWOBJ */
		if (!(b = pop(v)) || !(a = pop(v)))
			return -1;
		return call(v, a, b);
	case 'b': /* BUILD: state kept beside the object */
		if (!(b = pop(v)) || !v->sp)
			return b ? fail(v, "BUILD of an empty stack") : -1;
		a = v->stack[v->sp - 1];
		if (a == v->none || a == v->btrue || a == v->bfalse || a == v->empty_tuple)
			return fail(v, "BUILD on None, a boolean or ()");
		a->state = b;
		return 0;
	case 's': /* SETITEM */
		if (!(c = pop(v)) || !(b = pop(v)) || !v->sp)
			return v->sp ? -1 : fail(v, "SETITEM of an empty stack");
		a = v->stack[v->sp - 1];
		if (a->k != CK_PK_DICT)
			return fail(v, "SETITEM on a value that is not a dict");
		return add_item(a, b) < 0 || add_item(a, c) < 0 ? oom(v) : 0;
	case 'u': /* SETITEMS */
	case 'e': /* APPENDS */
		if (collect(v, CK_PK_TUPLE, &n) < 0)
			return -1;
		if (!v->sp)
			return fail(v, "SETITEMS/APPENDS of an empty stack");
		a = v->stack[v->sp - 1];
		if (a->k != (op == 'u' ? CK_PK_DICT : CK_PK_LIST) || (op == 'u' && n->n % 2))
			return fail(v, op == 'u' ? "SETITEMS on a value that is not a dict"
						 : "APPENDS on a value that is not a list");
		for (size_t i = 0; i < n->n; i++)
			if (add_item(a, n->items[i]) < 0)
				return oom(v);
		return 0;
	case 'a': /* APPEND */
		if (!(b = pop(v)) || !v->sp)
			return b ? fail(v, "APPEND of an empty stack") : -1;
		a = v->stack[v->sp - 1];
		if (a->k != CK_PK_LIST)
			return fail(v, "APPEND on a value that is not a list");
		return add_item(a, b) < 0 ? oom(v) : 0;
	case 'J': /* BININT: signed 32-bit */
	case 'K':
	case 'M': {
		int w = op == 'J' ? 4 : op == 'K' ? 1 : 2;
		if (need(v, (size_t)w) < 0)
			return -1;
		if (!(n = node(v, CK_PK_INT)))
			return oom(v);
		uint64_t x = rd(v, w);
		n->i = op == 'J' ? (int64_t)(int32_t)(uint32_t)x : (int64_t)x;
		return push(v, n);
	}
	case 0x8a: { /* LONG1: little-endian two's complement, at most 8 bytes here */
		if (need(v, 1) < 0)
			return -1;
		size_t w = v->b[v->pos++];
		if (w > 8)
			return fail(v, "integer wider than 64 bits");
		if (need(v, w) < 0)
			return -1;
		if (!(n = node(v, CK_PK_INT)))
			return oom(v);
		uint64_t x = rd(v, (int)w);
		if (w && w < 8 && (x >> (8 * w - 1)) & 1)
			x |= ~0ull << (8 * w); /* sign-extend */
		n->i = (int64_t)x;
		return push(v, n);
	}
	case 'N':
		return push(v, shared(v, &v->none, CK_PK_NONE, 0));
	case 0x88:
		return push(v, shared(v, &v->btrue, CK_PK_BOOL, 1));
	case 0x89:
		return push(v, shared(v, &v->bfalse, CK_PK_BOOL, 0));
	case 'G': { /* BINFLOAT: big-endian double */
		if (need(v, 8) < 0)
			return -1;
		if (!(n = node(v, CK_PK_FLOAT)))
			return oom(v);
		uint64_t x = 0;
		for (int i = 0; i < 8; i++)
			x = x << 8 | v->b[v->pos++];
		memcpy(&n->f, &x, 8);
		return push(v, n);
	}
	case 'Q': /* BINPERSID */
		if (!(a = pop(v)))
			return -1;
		if (!(n = node(v, CK_PK_PERSID)) || add_item(n, a) < 0)
			return oom(v);
		return push(v, n);
	case '.':
		*stop = 1;
		return 0;
	default: {
		char msg[64];
		v->pos--;
		snprintf(msg, sizeof msg, "opcode 0x%02x is not allowed", (unsigned)op);
		return fail(v, msg);
	}
	}
}

int ck_pickle_parse(const unsigned char *buf, size_t len, const char *what, struct ck_pickle *out,
		    struct ck_err *err)
{
	size_t used;
	return ck_pickle_parse_prefix(buf, len, what, out, &used, err);
}

void ck_pickle_each(const struct ck_pickle *p, void (*fn)(const struct ck_pk *, void *), void *ctx)
{
	for (const struct ck_pk_slab *s = p->slabs; s; s = s->next)
		for (size_t i = 0; i < s->used; i++)
			fn(&s->n[i], ctx);
}

int ck_pickle_parse_prefix(const unsigned char *buf, size_t len, const char *what,
			   struct ck_pickle *out, size_t *used, struct ck_err *err)
{
	memset(out, 0, sizeof *out);
	struct vm v = {.b = buf, .len = len, .what = what, .err = err, .p = out,
		       .max_nodes = len / 2 + 4096};
	int stop = 0, rc = 0;
	while (!stop && rc == 0) {
		if (v.pos >= len) {
			rc = fail(&v, "no STOP opcode");
			break;
		}
		rc = step(&v, &stop);
	}
	if (rc == 0 && v.sp != 1)
		rc = fail(&v, "STOP with other than one value on the stack");
	if (rc == 0) {
		out->root = v.stack[0];
		*used = v.pos;
	}
	free(v.stack);
	free(v.marks);
	free(v.memo);
	if (rc < 0)
		ck_pickle_free(out);
	return rc;
}

void ck_pickle_free(struct ck_pickle *p)
{
	for (struct ck_pk_slab *s = p->slabs, *next; s; s = next) {
		next = s->next;
		for (size_t i = 0; i < s->used; i++) {
			free(s->n[i].s);
			free(s->n[i].s2);
			free(s->n[i].items);
		}
		free(s);
	}
	memset(p, 0, sizeof *p);
}

int ck_pk_is_global(const struct ck_pk *n, const char *module, const char *name)
{
	return n && n->k == CK_PK_GLOBAL && !strcmp(n->s, module) && !strcmp(n->s2, name);
}
