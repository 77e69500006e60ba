/* The generator's tensor list, shared by the per-family builders. */
#ifndef CK_CKGEN_INT_H
#define CK_CKGEN_INT_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "ckgen.h"

/* G_FP8: F8_E4M3 with a G_SCALE (F32 weight_scale_inv) beside it; G_F32:
 * F32 whatever the model's dtype (DeepSeek's e_score_correction_bias);
 * G_MXBLOCKS / G_MXSCALES: U8 MXFP4 blocks and E8M0 scales (GPT-OSS). */
enum gkind { G_PLAIN, G_FP8, G_SCALE, G_F32, G_MXBLOCKS, G_MXSCALES };

struct gtensor {
	char name[192];
	int ndim;
	int64_t shape[4];
	enum gkind kind;
	uint64_t seed; /* fnv1a64 of the key whose values it holds: its own name, or the tensor it copies */
};

struct glist {
	struct gtensor *t;
	size_t n, cap;
};

/* Append tensor prefix + fmt(...) of shape [d0] or [d0, d1]; -1 on ENOMEM. */
int ckgen_add(struct glist *l, const char *prefix, int ndim, int64_t d0, int64_t d1,
	      const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Append a tensor of up to 4 dims and the given kind; -1 on ENOMEM. */
int ckgen_add_nd(struct glist *l, const char *prefix, int ndim, const int64_t *shape,
		 enum gkind kind, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* The last tensor added holds the values of key prefix + name (a copy, as
 * DeepSeek's MTP layer stores the shared embedding and head). */
void ckgen_copy_values(struct glist *l, const char *prefix, const char *name);
/* The last tensor added becomes FP8 with its block scales beside it
 * (nothing when block <= 0). */
int ckgen_make_fp8(struct glist *l, int64_t block);

/* ",\n  quantization_config: {...}" of an FP8 checkpoint (nothing otherwise) */
void ckgen_quant_config(const struct ckgen_spec *s, FILE *f);

/* DeepSeek-V3: MLA attention, dense first layers, routed + shared experts,
 * the multi-token-prediction layer after the last. */
int ckgen_build_deepseek(const struct ckgen_spec *s, struct glist *l);
void ckgen_deepseek_config(const struct ckgen_spec *s, FILE *f);

/* GPT-OSS: attention with biases and sinks, router with a bias, MXFP4
 * experts (or BF16 ones in transformers' layout when s->mxfp4 is 0). */
int ckgen_build_gptoss(const struct ckgen_spec *s, struct glist *l);
void ckgen_gptoss_config(const struct ckgen_spec *s, FILE *f);

#endif
