/* Decimal integers without printf: the planner writes one for every key
 * instance it builds (a 92,000-key MoE: hundreds of thousands), where the
 * format parsing of sprintf and snprintf was 7% of the planning instructions. */
#ifndef CK_NUMFMT_H
#define CK_NUMFMT_H

#include <stdint.h>

#define CK_FMT_INT_MAX 21 /* "-9223372036854775808" and its NUL */

/* u in decimal into out (room for CK_FMT_INT_MAX), NUL-terminated; returns
 * the number of characters before the NUL. */
static inline int ck_fmt_u64(char *out, uint64_t u)
{
	char dig[20];
	int nd = 0, k = 0;
	do
		dig[nd++] = (char)('0' + u % 10);
	while (u /= 10);
	while (nd)
		out[k++] = dig[--nd];
	out[k] = '\0';
	return k;
}

/* v in decimal, as ck_fmt_u64 */
static inline int ck_fmt_i64(char *out, int64_t v)
{
	if (v >= 0)
		return ck_fmt_u64(out, (uint64_t)v);
	out[0] = '-';
	return 1 + ck_fmt_u64(out + 1, 0 - (uint64_t)v);
}

#endif
