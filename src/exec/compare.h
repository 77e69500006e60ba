/* Tensor-by-tensor comparison of two plans (two checkpoints, either seen
 * through mappings), streamed through the engine in bounded chunks on a pool
 * of workers: memory is threads x 2 x CK_CMP_CHUNK whatever the sizes. Used
 * by `ckptfs diff` (values within a tolerance) and `ckptfs check-mapping`
 * (bytes, exactly). */
#ifndef CK_COMPARE_H
#define CK_COMPARE_H

#include <stdint.h>

#include "../plan/plan.h"

#define CK_CMP_CHUNK (8u << 20)

struct ck_cmp_opts {
	int bytes;	   /* compare bytes exactly (NaN payloads, -0) */
	double atol, rtol; /* |a - b| <= atol + rtol * |b| is equal */
	uint64_t ulp;	   /* or at most this many units in the last place (same dtype) */
	int threads;	   /* 0: one per core */
	int use_uring;
	/* test hooks (0: the defaults): the engines' window, bytes per read */
	uint64_t window_max, chunk;
};

/* One pair of tensors of the same name, dtype class and shape. */
struct ck_cmp_result {
	uint32_t a, b;		/* target indices in plans a and b */
	uint64_t n_diff;	/* elements outside the tolerance */
	uint64_t first;		/* flat index of the first of them */
	double first_a, first_b; /* their values */
	double max_abs;		/* largest |a - b| over all elements (NaN vs number: inf) */
	uint64_t max_ulp;	/* largest ulp distance (same float dtype only) */
	int ulp_valid;
};

struct ck_cmp_report {
	struct ck_cmp_result *r; /* common tensors whose dtype class and shape agree */
	size_t n;
	uint64_t bytes_a, bytes_b; /* compared */
	uint64_t read_a, read_b;   /* source bytes read for them */
};

/* Compare every pair (ia[k], ib[k]) of targets. Fails only on read errors. */
int ck_compare(const struct ck_plan *a, const struct ck_plan *b, const uint32_t *ia,
	       const uint32_t *ib, size_t n, const struct ck_cmp_opts *o, struct ck_cmp_report *out,
	       struct ck_err *err);
void ck_cmp_report_free(struct ck_cmp_report *r);
/* Whether the two dtypes' elements can be compared as numbers. */
int ck_cmp_comparable(enum ck_dtype a, enum ck_dtype b);

#endif
