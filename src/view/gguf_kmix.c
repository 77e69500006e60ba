#include "gguf_kmix.h"

#include <string.h>

#include "../ckpt/ggml_types.h"
#include "../plan/gguf_out.h"

/* N of a "blk.N." name, else -1 (what llama.cpp's sscanf gives). */
static int layer_of(const char *name)
{
	if (strncmp(name, "blk.", 4))
		return -1;
	int n = 0, digits = 0;
	for (const char *s = name + 4; *s >= '0' && *s <= '9'; s++, digits++)
		if (digits == 9) /* beyond any layer count */
			return -1;
		else
			n = n * 10 + (*s - '0');
	return digits && name[4 + digits] == '.' ? n : -1;
}

/* llama.cpp's weight order (its loader's map): by layer, tensors outside
 * the blocks first, then by name. */
static int before(const char *a, const char *b)
{
	int la = layer_of(a), lb = layer_of(b);
	return la != lb ? la < lb : strcmp(a, b) < 0;
}

/* How many of p's tensors whose names hold one of parts come before
 * tensor i in that order (llama.cpp's running count when it reaches i;
 * a tensor a --tensor-type pattern names skips the rules that count). */
static int rank_among(const struct ck_gguf_kmix *k_, const struct ck_plan *p, size_t i,
		      const char *const *parts, int n_parts)
{
	const unsigned char *k_manual = k_->manual;
	int r = 0;
	for (size_t j = 0; j < p->n; j++) {
		int hit = 0;
		for (int k = 0; k < n_parts && !hit; k++)
			hit = strstr(p->t[j].name, parts[k]) != NULL;
		r += j != i && hit && !(k_manual && k_manual[j]) &&
		     before(p->t[j].name, p->t[i].name);
	}
	return r;
}

static int count_of(const struct ck_plan *p, const char *const *parts, int n_parts)
{
	int c = 0;
	for (size_t j = 0; j < p->n; j++) {
		int hit = 0;
		for (int k = 0; k < n_parts && !hit; k++)
			hit = strstr(p->t[j].name, parts[k]) != NULL;
		c += hit;
	}
	return c;
}

/* The first and last eighth of the layers, and every third between. */
static int use_more_bits(int i, int n)
{
	return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static const char *const WV[] = {"attn_v.weight", "attn_qkv.weight", "attn_kv_b.weight"};

/* attn_v and the tensors llama.cpp counts with it: Phi-3's fused
 * attn_qkv, DeepSeek's attn_kv_b. */
static int is_wv(const char *name)
{
	return strstr(name, WV[0]) || strstr(name, WV[1]) || strstr(name, WV[2]);
}

static uint32_t attn_v_type(const struct ck_gguf_kmix *k, const struct ck_plan *p, size_t i,
			    uint32_t t)
{
	int iv = rank_among(k, p, i, WV, 3), nv = count_of(p, WV, 3);
	switch (k->ftype) {
	case CK_FTYPE_Q2_K: t = k->n_gqa >= 4 ? CK_GGML_Q4_K : CK_GGML_Q3_K; break;
	case CK_FTYPE_Q3_K_M: t = iv < 2 ? CK_GGML_Q5_K : CK_GGML_Q4_K; break;
	case CK_FTYPE_Q3_K_L: t = CK_GGML_Q5_K; break;
	case CK_FTYPE_Q4_K_M:
	case CK_FTYPE_Q5_K_M: t = use_more_bits(iv, nv) ? CK_GGML_Q6_K : t; break;
	case CK_FTYPE_Q4_K_S: t = iv < 4 ? CK_GGML_Q5_K : t; break;
	case CK_FTYPE_IQ4_NL:
	case CK_FTYPE_IQ4_XS: t = k->n_gqa >= 4 ? CK_GGML_Q5_K : t; break;
	default: break;
	}
	if (k->is_70b && (t == CK_GGML_Q3_K || t == CK_GGML_Q4_K))
		t = CK_GGML_Q5_K; /* 8 heads share each attn_v row: 8x smaller */
	if (k->n_expert == 8)
		t = CK_GGML_Q8_0;
	return t;
}

static uint32_t ffn_down_type(const struct ck_gguf_kmix *k, const struct ck_plan *p, size_t i,
			      uint32_t t)
{
	static const char *const fd[] = {"ffn_down"};
	int il = k->n_expert > 1 ? layer_of(p->t[i].name) : rank_among(k, p, i, fd, 1);
	int nl = k->n_layer;
	switch (k->ftype) {
	case CK_FTYPE_Q2_K: return CK_GGML_Q3_K;
	case CK_FTYPE_Q3_K_M: return il < nl / 16 ? CK_GGML_Q5_K : CK_GGML_Q4_K;
	case CK_FTYPE_Q3_K_L: return CK_GGML_Q5_K;
	case CK_FTYPE_Q4_K_M:
	case CK_FTYPE_Q5_K_M: return use_more_bits(il, nl) ? CK_GGML_Q6_K : t;
	case CK_FTYPE_Q4_K_S: return il < nl / 8 ? CK_GGML_Q5_K : t;
	case CK_FTYPE_IQ4_NL:
	case CK_FTYPE_IQ4_XS: return il < nl / 8 && !k->has_imatrix ? CK_GGML_Q5_K : t;
	/* with a matrix, "against craziness" in the first layers; without
	 * one the files stay what they were before matrices */
	case CK_FTYPE_Q4_0: return il < nl / 8 && k->has_imatrix ? CK_GGML_Q4_1 : t;
	case CK_FTYPE_Q5_0: return il < nl / 8 && k->has_imatrix ? CK_GGML_Q5_1 : t;
	default: return t;
	}
}

static uint32_t attn_output_type(const struct ck_gguf_kmix *k, uint32_t t)
{
	if (k->n_expert == 8)
		return k->ftype == CK_FTYPE_Q2_K || k->ftype == CK_FTYPE_Q3_K_S ||
			       k->ftype == CK_FTYPE_Q3_K_M || k->ftype == CK_FTYPE_Q4_K_S ||
			       k->ftype == CK_FTYPE_Q4_K_M || k->ftype == CK_FTYPE_IQ4_NL ||
			       k->ftype == CK_FTYPE_IQ4_XS
			   ? CK_GGML_Q5_K
			   : t;
	return k->ftype == CK_FTYPE_Q2_K     ? CK_GGML_Q3_K
	       : k->ftype == CK_FTYPE_Q3_K_M ? CK_GGML_Q4_K
	       : k->ftype == CK_FTYPE_Q3_K_L ? CK_GGML_Q5_K
					     : t;
}

static int is_float(uint32_t t)
{
	return t == CK_GGUF_F32 || t == CK_GGUF_F16 || t == CK_GGUF_BF16;
}

uint32_t ck_gguf_fit_rows(uint32_t t, int64_t nx)
{
	size_t qk = 0, qb;
	if (is_float(t) || (ck_ggml_block(t, &qk, &qb) && nx % (int64_t)qk == 0))
		return t;
	t = t == CK_GGML_IQ4_XS			     ? CK_GGML_IQ4_NL
	    : t == CK_GGML_Q2_K || t == CK_GGML_Q3_K ? CK_GGML_Q4_0
	    : t == CK_GGML_Q4_K			     ? CK_GGML_Q5_0
	    : t == CK_GGML_Q5_K			     ? CK_GGML_Q5_1
	    : qk <= 32				     ? t
						     : CK_GGML_Q8_0;
	return nx % 32 ? CK_GGUF_F16 : t;
}

uint32_t ck_gguf_kmix_type(const struct ck_gguf_kmix *k, const struct ck_plan *p, size_t i)
{
	const char *name = p->t[i].name;
	const int64_t nx = p->t[i].v.shape[p->t[i].v.ndim - 1];
	uint32_t t = k->base;
	if (k->pure) /* rows that are not whole blocks still fall back, as newer
		      * llama.cpp's do (the tested one's --pure aborts there) */
		return ck_gguf_fit_rows(t, nx);
	const int output = !strcmp(name, "output.weight") ||
			   (!k->has_output && !strcmp(name, "token_embd.weight"));
	if (k->ftype == CK_FTYPE_MXFP4_MOE) /* a stack of experts (ne[2] > 1) MXFP4 */
		t = !output && p->t[i].v.ndim == 3 && p->t[i].v.shape[0] > 1 ? CK_GGML_MXFP4
									     : CK_GGML_Q8_0;
	else if (output)
		t = nx % 256 ? CK_GGML_Q8_0 : CK_GGML_Q6_K;
	else if (!strcmp(name, "token_embd.weight"))
		t = k->base;
	else if (is_wv(name))
		t = attn_v_type(k, p, i, t);
	else if (strstr(name, "attn_k.weight"))
		t = k->n_expert == 8 ? CK_GGML_Q8_0 : t;
	else if (strstr(name, "ffn_down"))
		t = ffn_down_type(k, p, i, t);
	else if (strstr(name, "attn_output.weight"))
		t = attn_output_type(k, t);
	return ck_gguf_fit_rows(t, nx);
}
