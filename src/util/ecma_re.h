/* ECMAScript regular expressions (std::regex's default grammar, which
 * llama-quantize's --tensor-type patterns use) for one question: does the
 * pattern match anywhere in a string (std::regex_search). Compiled to a
 * Thompson NFA and run as one, so a search is linear in the string times
 * the program, whatever the pattern: no backtracking, no blow-up on
 * hostile patterns such as (a*)*b.
 *
 * The grammar: alternation, groups ( ) and (?: ), the quantifiers * + ?
 * {n} {n,} {n,m} (lazy ones too: a yes/no search cannot tell them apart),
 * . (any byte but \n and \r), classes [a-z_] [^0-9] with \d \s \w in them,
 * the escapes \d \D \s \S \w \W \t \n \r \f \v \0 \cX \xHH \uHHHH (ASCII),
 * \b \B ^ $, and any other escaped character as itself (as libstdc++ reads
 * it). Bytes are matched one by one, as std::regex over char does.
 * Refused, one message naming the offset: back-references, lookarounds,
 * named groups, a { that is no count, ranges out of order, counts over
 * CK_RE_MAX_COUNT, nesting deeper than CK_RE_MAX_DEPTH, \u past ASCII,
 * and programs over CK_RE_MAX_PROG instructions. */
#ifndef CK_ECMA_RE_H
#define CK_ECMA_RE_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define CK_RE_MAX_COUNT 1000
#define CK_RE_MAX_DEPTH 64
#define CK_RE_MAX_PROG 20000

struct ck_re_inst;

struct ck_re {
	struct ck_re_inst *prog;
	uint64_t (*sets)[4]; /* the byte sets of SET instructions */
	uint32_t n, n_sets;
};

/* 0, or -1 with err: "at N: what is wrong" (N counts from 0). */
int ck_re_compile(const char *pattern, struct ck_re *re, struct ck_err *err);
/* 1 if re matches somewhere in s[0, len), 0 if not, -ENOMEM, or
 * -EOVERFLOW for a string of 4 GiB. */
int ck_re_search(const struct ck_re *re, const char *s, size_t len);
void ck_re_free(struct ck_re *re);

#endif
