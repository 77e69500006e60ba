#include "gguf_imatrix.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "../ckpt/ggml_types.h"

/* The types whose quantizers take weights (ggml's Q8_0 and the float
 * types ignore them). */
static int weighted(uint32_t q)
{
	return q == CK_GGML_Q2_K || q == CK_GGML_Q3_K || q == CK_GGML_Q4_K || q == CK_GGML_Q5_K ||
	       q == CK_GGML_Q6_K || q == CK_GGML_Q4_0 || q == CK_GGML_Q4_1 || q == CK_GGML_Q5_0 ||
	       q == CK_GGML_Q5_1 || q == CK_GGML_IQ4_NL || q == CK_GGML_IQ4_XS;
}

int ck_gguf_imatrix_attach(struct ck_plan *p, const char *path, const char *type,
			   struct ck_imatrix *m, size_t *used, struct ck_err *err)
{
	*used = 0;
	/* (Q8_0 takes none itself, but its file's --gguf-tensor-type tensors
	 * may; llama-quantize takes a matrix for it) */
	if (!strcasecmp(type, "F32") || !strcasecmp(type, "F16") || !strcasecmp(type, "BF16"))
		return ck_fail(err, CK_E_USAGE,
			       "an importance matrix goes with a quantized type (Q8_0 or a "
			       "llama-quantize mix: Q4_0, Q4_1, Q5_0, Q5_1, Q2_K ... Q6_K, IQ4_NL, "
			       "IQ4_XS, MXFP4_MOE): %s takes no weights",
			       type);
	if (ck_imatrix_load(path, m, err) < 0)
		return -1;
	size_t matched = 0;
	for (size_t i = 0; i < p->n; i++) {
		struct ck_target *t = &p->t[i];
		const struct ck_imatrix_entry *e = ck_imatrix_find(m, t->name);
		if (!e || t->v.ndim < 2)
			continue;
		/* llama.cpp's ne[0] * ne[2]: columns times the stacked matrices */
		const int nd = t->v.ndim;
		uint64_t want = (uint64_t)t->v.shape[nd - 1];
		for (int d = 0; d < nd - 2; d++)
			want *= (uint64_t)t->v.shape[d];
		if (e->n != want) {
			if (!strcmp(t->name, "token_embd.weight"))
				continue;
			return ck_fail(err, CK_E_SOURCE,
				       "%s: \"%s\" has %llu values, the tensor takes %llu (one per "
				       "column%s): an importance matrix of another model?",
				       path, t->name, (unsigned long long)e->n,
				       (unsigned long long)want, nd > 2 ? " of each expert" : "");
		}
		matched++;
		if (t->qtype && weighted(t->qtype)) {
			t->qw = e->v;
			(*used)++;
		}
	}
	if (!matched) /* (matched but unused: every tensor fell back to Q8_0 or F16) */
		return ck_fail(
		    err, CK_E_SOURCE,
		    "%s: its %zu entries name none of the view's matrices (names such as "
		    "blk.0.attn_q.weight): an importance matrix of another model?",
		    path, m->n);
	return 0;
}

void ck_gguf_imatrix_meta(const struct ck_imatrix *m, const char *path, struct ck_gguf_meta *meta)
{
	char s[128]; /* llama-quantize's override strings: 127 bytes */
	snprintf(s, sizeof s, "%s", path);
	ck_gguf_meta_str(meta, "quantize.imatrix.file", s);
	if (m->dataset) {
		snprintf(s, sizeof s, "%s", m->dataset);
		ck_gguf_meta_str(meta, "quantize.imatrix.dataset", s);
	}
	ck_gguf_meta_u32(meta, "quantize.imatrix.entries_count", (uint32_t)m->n);
	if (m->chunks > 0)
		ck_gguf_meta_u32(meta, "quantize.imatrix.chunks_count", (uint32_t)m->chunks);
}
