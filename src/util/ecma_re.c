#include "ecma_re.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The program: CHAR and SET consume a byte, SPLIT and JMP move without
 * one, ASSERT checks the position, MATCH ends a search. A jump's target is
 * an absolute index; every piece the parser builds is self-contained (its
 * jumps land inside it or just past its end), so pieces can be moved and
 * copied by adding the distance to their targets. */
enum { OP_CHAR, OP_SET, OP_SPLIT, OP_JMP, OP_ASSERT, OP_MATCH };
enum { A_BEGIN, A_END, A_WORD, A_NOT_WORD };

struct ck_re_inst {
	uint8_t op, c; /* c: CHAR's byte, ASSERT's kind */
	uint32_t x, y; /* targets (SPLIT: both; JMP: x); SET: x is the set */
};

struct parser {
	const unsigned char *s;
	size_t i, len;
	struct ck_re *re;
	uint32_t cap, set_cap;
	int depth;
	struct ck_err *err;
};

static int fail(struct parser *p, const char *what)
{
	return ck_fail(p->err, CK_E_USAGE, "at %zu: %s", p->i, what);
}

static int jumps(const struct ck_re_inst *in)
{
	return in->op == OP_SPLIT || in->op == OP_JMP;
}

static int room(struct parser *p, uint32_t k)
{
	struct ck_re *re = p->re;
	if (re->n + k > CK_RE_MAX_PROG)
		return fail(p, "the pattern's program would pass 20000 instructions");
	if (re->n + k <= p->cap)
		return 0;
	uint32_t cap = p->cap ? p->cap : 64;
	while (cap < re->n + k)
		cap *= 2;
	struct ck_re_inst *np = realloc(re->prog, cap * sizeof *np);
	if (!np)
		return ck_fail_sys(p->err, ENOMEM, "regex");
	re->prog = np;
	p->cap = cap;
	return 0;
}

static int emit(struct parser *p, uint8_t op, uint8_t c, uint32_t x, uint32_t y)
{
	if (room(p, 1) < 0)
		return -1;
	p->re->prog[p->re->n++] = (struct ck_re_inst){op, c, x, y};
	return 0;
}

/* Make k free slots at index at, moving [at, n) up by k. */
static int insert(struct parser *p, uint32_t at, uint32_t k)
{
	if (room(p, k) < 0)
		return -1;
	struct ck_re_inst *g = p->re->prog;
	memmove(g + at + k, g + at, (p->re->n - at) * sizeof *g);
	for (uint32_t j = at + k; j < p->re->n + k; j++)
		if (jumps(&g[j])) {
			g[j].x += k;
			g[j].y += k;
		}
	p->re->n += k;
	return 0;
}

/* Append a copy of the piece [s, e). */
static int copy(struct parser *p, uint32_t s, uint32_t e)
{
	if (room(p, e - s) < 0)
		return -1;
	struct ck_re_inst *g = p->re->prog;
	uint32_t d = p->re->n - s;
	for (uint32_t j = s; j < e; j++) {
		struct ck_re_inst in = g[j];
		if (jumps(&in)) {
			in.x += d;
			in.y += d;
		}
		g[p->re->n++] = in;
	}
	return 0;
}

static int new_set(struct parser *p, const uint64_t set[4])
{
	struct ck_re *re = p->re;
	if (re->n_sets == p->set_cap) {
		uint32_t cap = p->set_cap ? 2 * p->set_cap : 16;
		void *ns = realloc(re->sets, cap * sizeof *re->sets);
		if (!ns)
			return ck_fail_sys(p->err, ENOMEM, "regex");
		re->sets = ns;
		p->set_cap = cap;
	}
	memcpy(re->sets[re->n_sets], set, sizeof re->sets[0]);
	return emit(p, OP_SET, 0, re->n_sets++, 0);
}

static void add_range(uint64_t set[4], unsigned lo, unsigned hi)
{
	for (unsigned c = lo; c <= hi; c++)
		set[c / 64] |= 1ull << (c % 64);
}

static int is_word(unsigned c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_';
}

/* \d \s \w (or their complements, upper) into set; 0 if c is none. */
static int class_escape(unsigned c, uint64_t set[4])
{
	uint64_t one[4] = {0};
	unsigned l = c | 0x20;
	if (l == 'd')
		add_range(one, '0', '9');
	else if (l == 's') {
		add_range(one, '\t', '\r');
		add_range(one, ' ', ' ');
	} else if (l == 'w') {
		for (unsigned b = 0; b < 128; b++)
			if (is_word(b))
				add_range(one, b, b);
	} else
		return 0;
	for (int k = 0; k < 4; k++)
		set[k] |= c == l ? one[k] : ~one[k];
	return 1;
}

static int hex(struct parser *p, int digits)
{
	int v = 0;
	for (int k = 0; k < digits; k++, p->i++) {
		int c = p->i < p->len ? p->s[p->i] : 0;
		int d = c >= '0' && c <= '9'   ? c - '0'
			: c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10
					       : -1;
		if (d < 0)
			return fail(p, "\\x takes two hex digits, \\u four");
		v = v * 16 + d;
	}
	if (v > 0x7f)
		return fail(p, "\\u past ASCII (names are matched byte by byte)");
	return v;
}

/* The escape after a backslash (p->i at the character after it): a byte
 * (0-255), or -2 when it filled set with a class. \b and \B are the
 * caller's (a backspace in a class, an assertion outside). */
static int escape(struct parser *p, uint64_t set[4])
{
	if (p->i >= p->len)
		return fail(p, "a \\ at the end of the pattern");
	unsigned c = p->s[p->i++];
	if (class_escape(c, set))
		return -2;
	static const char ctl[] = "t\tn\nr\rf\fv\v";
	const char *k = c ? strchr(ctl, (int)c) : NULL;
	if (k && (k - ctl) % 2 == 0)
		return (unsigned char)k[1];
	if (c >= '1' && c <= '9')
		return p->i--, fail(p, "back-references (\\1 ...) are not supported");
	if (c == '0')
		return p->i < p->len && p->s[p->i] >= '0' && p->s[p->i] <= '9'
			   ? fail(p, "octal escapes are not supported")
			   : 0;
	if (c == 'x' || c == 'u')
		return hex(p, c == 'x' ? 2 : 4);
	if (c == 'c') {
		unsigned l = p->i < p->len ? p->s[p->i] | 0x20 : 0;
		if (l < 'a' || l > 'z')
			return fail(p, "\\c takes a letter");
		return (int)(p->s[p->i++] % 32);
	}
	if (c == 'k' && p->i < p->len && p->s[p->i] == '<')
		return fail(p, "named back-references are not supported");
	return (int)c; /* any other escaped character is itself */
}

/* One member of a class: a byte, or -2 for a class escape. */
static int class_atom(struct parser *p, uint64_t set[4])
{
	unsigned c = p->s[p->i++];
	if (c != '\\')
		return (int)c;
	if (p->i < p->len && p->s[p->i] == 'b')
		return p->i++, '\b';
	if (p->i < p->len && p->s[p->i] == 'B')
		return fail(p, "\\B in a class");
	return escape(p, set);
}

static int parse_class(struct parser *p)
{
	uint64_t set[4] = {0};
	int neg = p->i < p->len && p->s[p->i] == '^';
	p->i += (size_t)neg;
	while (p->i < p->len && p->s[p->i] != ']') {
		int lo = class_atom(p, set);
		if (lo == -1)
			return -1;
		if (p->i + 1 < p->len && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
			p->i++;
			int hi = class_atom(p, set);
			if (hi == -1)
				return -1;
			if (lo == -2 || hi == -2)
				return fail(p, "a range whose end is a class (\\d, \\w, \\s)");
			if (lo > hi)
				return fail(p, "a range out of order");
			add_range(set, (unsigned)lo, (unsigned)hi);
		} else if (lo >= 0)
			add_range(set, (unsigned)lo, (unsigned)lo);
	}
	if (p->i >= p->len)
		return fail(p, "a [ without its ]");
	p->i++;
	if (neg)
		for (int k = 0; k < 4; k++)
			set[k] = ~set[k];
	return new_set(p, set);
}

static int parse_alt(struct parser *p);

static int parse_group(struct parser *p)
{
	if (p->i < p->len && p->s[p->i] == '?') {
		if (p->i + 1 < p->len && p->s[p->i + 1] == ':')
			p->i += 2;
		else
			return fail(p, "lookarounds and named groups are not supported");
	}
	if (++p->depth > CK_RE_MAX_DEPTH)
		return fail(p, "groups nested deeper than 64");
	if (parse_alt(p) < 0)
		return -1;
	p->depth--;
	if (p->i >= p->len || p->s[p->i] != ')')
		return fail(p, "a ( without its )");
	p->i++;
	return 0;
}

/* An atom at p->i: 1 if one was compiled (quantifiable), 0 for an
 * assertion, -1. */
static int parse_atom(struct parser *p)
{
	unsigned c = p->s[p->i++];
	uint64_t set[4] = {0};
	switch (c) {
	case '^': return emit(p, OP_ASSERT, A_BEGIN, 0, 0) < 0 ? -1 : 0;
	case '$': return emit(p, OP_ASSERT, A_END, 0, 0) < 0 ? -1 : 0;
	case '(': return parse_group(p) < 0 ? -1 : 1;
	case '[': return parse_class(p) < 0 ? -1 : 1;
	case '.':
		for (int k = 0; k < 4; k++)
			set[k] = ~0ull;
		set[0] &= ~(1ull << '\n' | 1ull << '\r');
		return new_set(p, set) < 0 ? -1 : 1;
	case '*':
	case '+':
	case '?': return p->i--, fail(p, "nothing to repeat");
	case '{': return p->i--, fail(p, "a { that is not a count {n}, {n,} or {n,m}");
	case '\\': break;
	default: return emit(p, OP_CHAR, (uint8_t)c, 0, 0) < 0 ? -1 : 1;
	}
	if (p->i < p->len && (p->s[p->i] == 'b' || p->s[p->i] == 'B'))
		return emit(p, OP_ASSERT, p->s[p->i++] == 'b' ? A_WORD : A_NOT_WORD, 0, 0) < 0 ? -1
											       : 0;
	int b = escape(p, set);
	if (b == -1)
		return -1;
	return (b == -2 ? new_set(p, set) : emit(p, OP_CHAR, (uint8_t)b, 0, 0)) < 0 ? -1 : 1;
}

static int number(struct parser *p, long *v)
{
	size_t at = p->i;
	*v = 0;
	while (p->i < p->len && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
		*v = *v * 10 + (p->s[p->i++] - '0');
		if (*v > CK_RE_MAX_COUNT)
			return fail(p, "a count over 1000");
	}
	return p->i > at ? 1 : 0;
}

/* The quantifier at p->i, if any: *min, *max (-1: no bound); 0 if there is
 * none, 1 if there is, -1. */
static int quantifier(struct parser *p, long *min, long *max)
{
	if (p->i >= p->len)
		return 0;
	unsigned c = p->s[p->i];
	if (c == '*' || c == '+' || c == '?') {
		p->i++;
		*min = c == '+';
		*max = c == '?' ? 1 : -1;
	} else if (c == '{') {
		p->i++;
		int r = number(p, min);
		if (r <= 0)
			return r < 0 ? -1 : fail(p, "a { that is not a count {n}, {n,} or {n,m}");
		*max = *min;
		if (p->i < p->len && p->s[p->i] == ',') {
			p->i++;
			r = number(p, max);
			if (r < 0)
				return -1;
			*max = r ? *max : -1;
		}
		if (p->i >= p->len || p->s[p->i] != '}')
			return fail(p, "a { that is not a count {n}, {n,} or {n,m}");
		p->i++;
		if (*max >= 0 && *max < *min)
			return fail(p, "a count {n,m} with m under n");
	} else
		return 0;
	p->i += p->i < p->len && p->s[p->i] == '?'; /* lazy: the same yes/no */
	return 1;
}

/* The piece [s, n) (its template) repeated min to max times (-1: any). */
static int repeat(struct parser *p, uint32_t s, long min, long max)
{
	struct ck_re_inst *g;
	uint32_t len = p->re->n - s, at;
	if ((uint64_t)len * (uint64_t)(max < 0 ? min + 2 : max + 1) > CK_RE_MAX_PROG)
		return fail(p, "the pattern's program would pass 20000 instructions");
	if (min == 0) { /* the template itself becomes optional or a loop */
		if (max == 0) {
			p->re->n = s;
			return 0;
		}
		if (insert(p, s, 1) < 0 || (max < 0 && emit(p, OP_JMP, 0, s, s) < 0))
			return -1;
		g = p->re->prog;
		g[s] = (struct ck_re_inst){OP_SPLIT, 0, s + 1, p->re->n};
		s++; /* the template */
		min = 1;
		max = max < 0 ? 1 : max;
	}
	for (long k = 1; k < min; k++)
		if (copy(p, s, s + len) < 0)
			return -1;
	if (max < 0) /* the last copy again and again */
		return emit(p, OP_SPLIT, 0, p->re->n - len, p->re->n + 1);
	for (long k = min; k < max; k++) {
		at = p->re->n;
		if (emit(p, OP_SPLIT, 0, 0, 0) < 0 || copy(p, s, s + len) < 0)
			return -1;
		p->re->prog[at] = (struct ck_re_inst){OP_SPLIT, 0, at + 1, p->re->n};
	}
	return 0;
}

static int parse_cat(struct parser *p)
{
	while (p->i < p->len && p->s[p->i] != '|' && p->s[p->i] != ')') {
		uint32_t s = p->re->n;
		int atom = parse_atom(p);
		if (atom < 0)
			return -1;
		long min, max;
		int q = quantifier(p, &min, &max);
		if (q < 0)
			return -1;
		if (q && !atom)
			return p->i--, fail(p, "nothing to repeat (an assertion)");
		if (q && repeat(p, s, min, max) < 0)
			return -1;
		if (p->i < p->len && (p->s[p->i] == '*' || p->s[p->i] == '+' || p->s[p->i] == '?' ||
				      p->s[p->i] == '{'))
			return fail(p, "nothing to repeat (a quantifier after a quantifier)");
	}
	return 0;
}

/* A|B|C as SPLIT(SPLIT(A, B), C), built by moving what is there up. */
static int parse_alt(struct parser *p)
{
	uint32_t s = p->re->n;
	if (parse_cat(p) < 0)
		return -1;
	while (p->i < p->len && p->s[p->i] == '|') {
		p->i++;
		if (insert(p, s, 1) < 0)
			return -1;
		uint32_t jmp = p->re->n;
		if (emit(p, OP_JMP, 0, 0, 0) < 0 || parse_cat(p) < 0)
			return -1;
		struct ck_re_inst *g = p->re->prog;
		g[s] = (struct ck_re_inst){OP_SPLIT, 0, s + 1, jmp + 1};
		g[jmp].x = g[jmp].y = p->re->n;
	}
	return 0;
}

int ck_re_compile(const char *pattern, struct ck_re *re, struct ck_err *err)
{
	*re = (struct ck_re){0};
	struct parser p = {(const unsigned char *)pattern, 0, strlen(pattern), re, 0, 0, 0, err};
	if (parse_alt(&p) < 0 || (p.i < p.len && fail(&p, "a ) without its (") < 0) ||
	    emit(&p, OP_MATCH, 0, 0, 0) < 0) {
		ck_re_free(re);
		return -1;
	}
	return 0;
}

void ck_re_free(struct ck_re *re)
{
	free(re->prog);
	free(re->sets);
	*re = (struct ck_re){0};
}

struct thread_list {
	uint32_t *pc, n;
};

static int holds(const struct ck_re_inst *in, const char *s, size_t len, size_t at)
{
	int before = at > 0 && is_word((unsigned char)s[at - 1]);
	int after = at < len && is_word((unsigned char)s[at]);
	switch (in->c) {
	case A_BEGIN: return at == 0;
	case A_END: return at == len;
	case A_WORD: return before != after;
	default: return before == after;
	}
}

/* Add pc and what it reaches without a byte to l, each once per position
 * (mark); 1 if MATCH is among them. stack: room for every pc. */
static int add(const struct ck_re *re, struct thread_list *l, uint32_t pc, uint32_t *mark,
	       uint32_t gen, uint32_t *stack, const char *s, size_t len, size_t at)
{
	uint32_t top = 0;
	stack[top++] = pc;
	while (top) {
		pc = stack[--top];
		if (mark[pc] == gen)
			continue;
		mark[pc] = gen;
		const struct ck_re_inst *in = &re->prog[pc];
		switch (in->op) {
		case OP_MATCH: return 1;
		case OP_JMP: stack[top++] = in->x; break;
		case OP_SPLIT:
			stack[top++] = in->y;
			stack[top++] = in->x;
			break;
		case OP_ASSERT:
			if (holds(in, s, len, at))
				stack[top++] = pc + 1;
			break;
		default: l->pc[l->n++] = pc;
		}
	}
	return 0;
}

int ck_re_search(const struct ck_re *re, const char *s, size_t len)
{
	uint32_t n = re->n;
	if (len >= UINT32_MAX - 2) /* a position's mark must not come round again */
		return -EOVERFLOW;
	/* two lists, marks, and a stack that holds each pc at most twice */
	uint32_t *mem = calloc((size_t)n * 5 + 1, sizeof *mem);
	if (!mem)
		return -ENOMEM;
	struct thread_list cur = {mem, 0}, next = {mem + n, 0};
	uint32_t *mark = mem + 2 * (size_t)n, *stack = mem + 3 * (size_t)n;
	int found = 0;
	for (size_t at = 0; !found; at++) {
		uint32_t gen = (uint32_t)at + 1;
		found = add(re, &cur, 0, mark, gen, stack, s, len, at); /* a match may start here */
		if (found || at == len)
			break;
		next.n = 0;
		unsigned char b = (unsigned char)s[at];
		for (uint32_t k = 0; k < cur.n && !found; k++) {
			const struct ck_re_inst *in = &re->prog[cur.pc[k]];
			int ok = in->op == OP_CHAR ? in->c == b
						   : (re->sets[in->x][b / 64] >> (b % 64)) & 1;
			if (ok)
				found = add(re, &next, cur.pc[k] + 1, mark, gen + 1, stack, s, len,
					    at + 1);
		}
		struct thread_list t = cur;
		cur = next;
		next = t;
	}
	free(mem);
	return found;
}
