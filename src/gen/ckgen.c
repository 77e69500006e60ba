#include "ckgen.h"
#include "ckgen_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../ckpt/safetensors.h"
#include "../ckpt/st_writer.h"
#include "../kern/fpconv.h"
#include "../util/jsonw.h"

uint64_t ckgen_splitmix64(uint64_t x)
{
	uint64_t z = x + 0x9E3779B97F4A7C15ULL;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

uint64_t ckgen_fnv1a64(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
	return h;
}

double ckgen_value(const char *key, uint64_t i)
{
	return ((double)(ckgen_splitmix64(ckgen_fnv1a64(key) + i) % 255) - 127.0) / 64.0;
}

struct preset {
	const char *arch, *name;
	int64_t hidden, intermediate, layers, heads, kv_heads, vocab, experts, positions;
	int tie;
};

static const struct preset presets[] = {
    {"llama", "tiny", 64, 96, 2, 4, 2, 256, 0, 0, 0},
    {"llama", "small", 512, 1408, 4, 8, 2, 4096, 0, 0, 0},
    {"llama", "1b", 2048, 8192, 16, 32, 8, 128256, 0, 0, 1},
    {"llama", "8b", 4096, 14336, 32, 32, 8, 128256, 0, 0, 0},
    {"llama", "70b", 8192, 28672, 80, 64, 8, 128256, 0, 0, 0},
    {"gpt2", "tiny", 64, 256, 2, 4, 4, 256, 0, 128, 1},
    {"gpt2", "124m", 768, 3072, 12, 12, 12, 50257, 0, 1024, 1},
    {"mixtral", "tiny", 64, 96, 2, 4, 2, 256, 4, 0, 0},
    {"qwen2", "tiny", 64, 96, 2, 4, 2, 256, 0, 0, 1},
    {"qwen2", "7b", 3584, 18944, 28, 28, 4, 152064, 0, 0, 0},
    {"qwen3", "tiny", 64, 96, 2, 4, 2, 256, 0, 0, 0},
    {"qwen3", "8b", 4096, 12288, 36, 32, 8, 151936, 0, 0, 0},
    {"mixtral", "8x7b", 4096, 14336, 32, 32, 8, 32000, 8, 0, 0},
    {"phi3", "tiny", 64, 96, 2, 4, 2, 256, 0, 0, 0},
    {"phi3", "mini", 3072, 8192, 32, 32, 32, 32064, 0, 0, 0},
    {"phi3", "medium", 5120, 17920, 40, 40, 10, 32064, 0, 0, 0},
    {"gemma", "tiny", 64, 96, 2, 4, 2, 256, 0, 0, 1},
    {"gemma", "2b", 2048, 16384, 18, 8, 1, 256000, 0, 0, 1},
    {"gemma", "7b", 3072, 24576, 28, 16, 16, 256000, 0, 0, 1},
    {"gemma2", "tiny", 64, 96, 2, 4, 2, 256, 0, 0, 1},
    {"gemma2", "2b", 2304, 9216, 26, 8, 4, 256000, 0, 0, 1},
    {"gemma2", "9b", 3584, 14336, 42, 16, 8, 256000, 0, 0, 1},
    {"gemma3", "tiny", 64, 96, 2, 4, 2, 256, 0, 0, 1},
    {"gemma3", "1b", 1152, 6912, 26, 4, 1, 262144, 0, 0, 1},
    {"gemma3", "27b", 5376, 21504, 62, 32, 16, 262208, 0, 0, 1},
    {"qwen3-moe", "tiny", 64, 96, 2, 4, 2, 256, 4, 0, 0},
    {"qwen3-moe", "30b-a3b", 2048, 6144, 48, 32, 4, 151936, 128, 0, 0},
    {"qwen3-moe", "235b-a22b", 4096, 12288, 94, 64, 4, 151936, 128, 0, 0},
    {"qwen2-moe", "tiny", 64, 96, 2, 4, 2, 256, 4, 0, 0},
    {"olmo2", "tiny", 64, 96, 2, 4, 2, 256, 0, 0, 0},
    {"olmo2", "7b", 4096, 11008, 32, 32, 32, 100352, 0, 4096, 0},
    {"qwen2-moe", "a2.7b", 2048, 5632, 24, 16, 16, 151936, 60, 0, 0},
    {"deepseek-v3", "tiny", 64, 96, 3, 4, 4, 256, 4, 0, 0},
    {"deepseek-v3", "671b", 7168, 18432, 61, 128, 128, 129280, 256, 0, 0},
    {"gpt-oss", "tiny", 64, 64, 2, 4, 2, 256, 4, 0, 0},
    {"gpt-oss", "20b", 2880, 2880, 24, 64, 8, 201088, 32, 0, 0},
    {"gpt-oss", "120b", 2880, 2880, 36, 64, 8, 201088, 128, 0, 0},
};

/* The sizes a preset's table row does not carry: explicit head_dims, MoE
 * and MLA sizes, as the real models' config.json have them. */
/* 1, 2 or 3 for Gemma's generations, 0 for other models */
static int gemma_generation(const char *arch)
{
	return !strcmp(arch, "gemma") ? 1 : !strcmp(arch, "gemma2") ? 2 : !strcmp(arch, "gemma3") ? 3 : 0;
}

static void preset_extras(struct ckgen_spec *s, int tiny)
{
	if (!strcmp(s->arch, "qwen3") || !strcmp(s->arch, "qwen3-moe"))
		s->head_dim = tiny ? 32 : 128; /* not hidden/heads on the tiny one */
	if (gemma_generation(s->arch)) /* 256 (27b: 128) on the real ones, not hidden/heads */
		s->head_dim = tiny ? 32 : s->hidden == 5376 ? 128 : 256;
	if (!strcmp(s->arch, "qwen3-moe"))
		s->moe_intermediate = tiny ? 32 : s->hidden == 2048 ? 768 : 1536;
	if (!strcmp(s->arch, "qwen2-moe")) /* Qwen1.5-MoE-A2.7B */
		s->moe_intermediate = tiny ? 32 : 1408;
	if (!strcmp(s->arch, "gpt-oss")) { /* head_dim 64 on both: 64 x 64 != 2880 */
		s->head_dim = tiny ? 32 : 64;
		s->dtype = CK_DT_BF16;
		s->mxfp4 = 1;
	}
	if (!strcmp(s->arch, "deepseek-v3")) {
		s->moe_intermediate = tiny ? 32 : 2048;
		s->shared_experts = 1;
		s->first_dense = tiny ? 1 : 3;
		s->mtp_layers = 1;
		s->q_lora = tiny ? 32 : 1536;
		s->kv_lora = tiny ? 16 : 512;
		s->qk_nope = tiny ? 16 : 128;
		s->qk_rope = tiny ? 8 : 64;
		s->v_head = tiny ? 16 : 128;
		if (!tiny) { /* the released checkpoint: BF16 with FP8 128x128 blocks */
			s->dtype = CK_DT_BF16;
			s->fp8_block = 128;
		}
	}
}

int ckgen_preset(struct ckgen_spec *spec, const char *arch, const char *preset,
		 struct ck_err *err)
{
	for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
		const struct preset *p = &presets[i];
		if (strcmp(p->arch, arch) || strcmp(p->name, preset))
			continue;
		memset(spec, 0, sizeof *spec);
		snprintf(spec->arch, sizeof spec->arch, "%s", arch);
		spec->hidden = p->hidden;
		spec->intermediate = p->intermediate;
		spec->layers = p->layers;
		spec->heads = p->heads;
		spec->kv_heads = p->kv_heads;
		spec->vocab = p->vocab;
		spec->experts = p->experts;
		spec->positions = p->positions;
		spec->tie = p->tie;
		spec->dtype = CK_DT_F32;
		spec->shards = 1;
		preset_extras(spec, p->hidden == 64);
		return 0;
	}
	return ck_fail(err, CK_E_USAGE, "no preset \"%s\" for model \"%s\"", preset, arch);
}

int ckgen_add(struct glist *l, const char *prefix, int ndim, int64_t d0, int64_t d1,
	      const char *fmt, ...)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		struct gtensor *t = realloc(l->t, cap * sizeof *t);
		if (!t)
			return -1;
		l->t = t;
		l->cap = cap;
	}
	struct gtensor *g = &l->t[l->n++];
	int k = snprintf(g->name, sizeof g->name, "%s", prefix);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(g->name + k, sizeof g->name - (size_t)k, fmt, ap);
	va_end(ap);
	g->ndim = ndim;
	g->shape[0] = d0;
	g->shape[1] = d1;
	g->kind = G_PLAIN;
	g->seed = ckgen_fnv1a64(g->name);
	return 0;
}

void ckgen_copy_values(struct glist *l, const char *prefix, const char *name)
{
	char key[sizeof l->t->name];
	snprintf(key, sizeof key, "%s%s", prefix, name);
	l->t[l->n - 1].seed = ckgen_fnv1a64(key);
}

int ckgen_add_nd(struct glist *l, const char *prefix, int ndim, const int64_t *shape,
		 enum gkind kind, const char *fmt, ...)
{
	char name[sizeof l->t->name];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(name, sizeof name, fmt, ap);
	va_end(ap);
	if (ckgen_add(l, prefix, ndim, 0, 0, "%s", name) < 0)
		return -1;
	struct gtensor *g = &l->t[l->n - 1];
	for (int d = 0; d < ndim && d < 4; d++)
		g->shape[d] = shape[d];
	g->kind = kind;
	return 0;
}

int ckgen_make_fp8(struct glist *l, int64_t block)
{
	if (block <= 0)
		return 0;
	struct gtensor w = l->t[l->n - 1];
	l->t[l->n - 1].kind = G_FP8;
	if (ckgen_add(l, "", 2, (w.shape[0] + block - 1) / block, (w.shape[1] + block - 1) / block,
		      "%s_scale_inv", w.name) < 0)
		return -1;
	l->t[l->n - 1].kind = G_SCALE;
	return 0;
}

void ckgen_quant_config(const struct ckgen_spec *s, FILE *f)
{
	if (s->fp8_block > 0)
		fprintf(f,
			",\n  \"quantization_config\": {\"activation_scheme\": \"dynamic\", "
			"\"fmt\": \"e4m3\", \"quant_method\": \"fp8\", \"weight_block_size\": "
			"[%" PRId64 ", %" PRId64 "]}",
			s->fp8_block, s->fp8_block);
}

static enum ck_dtype gdtype(const struct ckgen_spec *s, const struct gtensor *t)
{
	return t->kind == G_FP8			  ? CK_DT_F8_E4M3
	       : t->kind == G_PLAIN		  ? s->dtype
	       : t->kind == G_MXBLOCKS || t->kind == G_MXSCALES ? CK_DT_U8
								 : CK_DT_F32;
}

static int64_t head_dim(const struct ckgen_spec *s)
{
	return s->head_dim ? s->head_dim : s->hidden / s->heads;
}

/* Qwen2-MoE's shared expert: an MLP of intermediate_size beside the routed
 * ones, scaled by sigmoid(shared_expert_gate . x), a [1, hidden] linear. */
static int build_shared_expert(const struct ckgen_spec *s, struct glist *l, int64_t L)
{
	const char *p = s->prefix, *m = "model.layers.%" PRId64 ".mlp.shared_expert.%s.weight";
	int64_t H = s->hidden, I = s->intermediate, B = s->fp8_block;
	int r = ckgen_add(l, p, 2, I, H, m, L, "gate_proj") || ckgen_make_fp8(l, B);
	r |= ckgen_add(l, p, 2, I, H, m, L, "up_proj") || ckgen_make_fp8(l, B);
	r |= ckgen_add(l, p, 2, H, I, m, L, "down_proj") || ckgen_make_fp8(l, B);
	r |= ckgen_add(l, p, 2, 1, H, "model.layers.%" PRId64 ".mlp.shared_expert_gate.weight", L);
	return r;
}

static int build_llama(const struct ckgen_spec *s, struct glist *l)
{
	const char *p = s->prefix;
	int64_t H = s->hidden, I = s->intermediate, hd = head_dim(s);
	int r = ckgen_add(l, p, 2, s->vocab, H, "model.embed_tokens.weight");
	for (int64_t L = 0; L < s->layers && !r; L++) {
		const char *a = "model.layers.%" PRId64 ".self_attn.%s.weight";
		int olmo2 = !strcmp(s->arch, "olmo2"); /* norms after attention and MLP only */
		if (!olmo2)
			r |= ckgen_add(l, p, 1, H, 0,
				       "model.layers.%" PRId64 ".input_layernorm.weight", L);
		int64_t B = s->fp8_block;
		int phi3 = !strcmp(s->arch, "phi3"); /* HF's own fused [q; k; v], [gate; up] */
		if (phi3) {
			r |= ckgen_add(l, p, 2, (s->heads + 2 * s->kv_heads) * hd, H, a, L, "qkv_proj") ||
			     ckgen_make_fp8(l, B);
		} else {
			r |= ckgen_add(l, p, 2, s->heads * hd, H, a, L, "q_proj") || ckgen_make_fp8(l, B);
			r |= ckgen_add(l, p, 2, s->kv_heads * hd, H, a, L, "k_proj") || ckgen_make_fp8(l, B);
			r |= ckgen_add(l, p, 2, s->kv_heads * hd, H, a, L, "v_proj") || ckgen_make_fp8(l, B);
		}
		if (!strncmp(s->arch, "qwen2", 5)) { /* Q, K and V biases */
			const char *bias = "model.layers.%" PRId64 ".self_attn.%s.bias";
			r |= ckgen_add(l, p, 1, s->heads * hd, 0, bias, L, "q_proj");
			r |= ckgen_add(l, p, 1, s->kv_heads * hd, 0, bias, L, "k_proj");
			r |= ckgen_add(l, p, 1, s->kv_heads * hd, 0, bias, L, "v_proj");
		}
		if (olmo2) { /* RMSNorm over each whole projection, not per head */
			r |= ckgen_add(l, p, 1, s->heads * hd, 0, a, L, "q_norm");
			r |= ckgen_add(l, p, 1, s->kv_heads * hd, 0, a, L, "k_norm");
		}
		if (!strncmp(s->arch, "qwen3", 5) || !strcmp(s->arch, "gemma3")) {
			/* per-head RMSNorm of Q and K */
			r |= ckgen_add(l, p, 1, hd, 0, a, L, "q_norm");
			r |= ckgen_add(l, p, 1, hd, 0, a, L, "k_norm");
		}
		r |= ckgen_add(l, p, 2, H, s->heads * hd, a, L, "o_proj") || ckgen_make_fp8(l, B);
		r |= ckgen_add(l, p, 1, H, 0, "model.layers.%" PRId64 ".post_attention_layernorm.weight",
			 L);
		if (olmo2)
			r |= ckgen_add(l, p, 1, H, 0,
				       "model.layers.%" PRId64 ".post_feedforward_layernorm.weight",
				       L);
		if (gemma_generation(s->arch) >= 2) { /* norms around the MLP too */
			const char *n = "model.layers.%" PRId64 ".%s_feedforward_layernorm.weight";
			r |= ckgen_add(l, p, 1, H, 0, n, L, "pre");
			r |= ckgen_add(l, p, 1, H, 0, n, L, "post");
		}
		if (!strcmp(s->arch, "mixtral")) {
			const char *e = "model.layers.%" PRId64
					".block_sparse_moe.experts.%" PRId64 ".%s.weight";
			r |= ckgen_add(l, p, 2, s->experts, H,
				 "model.layers.%" PRId64 ".block_sparse_moe.gate.weight", L);
			for (int64_t x = 0; x < s->experts; x++) {
				r |= ckgen_add(l, p, 2, I, H, e, L, x, "w1") || ckgen_make_fp8(l, B);
				r |= ckgen_add(l, p, 2, H, I, e, L, x, "w2") || ckgen_make_fp8(l, B);
				r |= ckgen_add(l, p, 2, I, H, e, L, x, "w3") || ckgen_make_fp8(l, B);
			}
		} else if (strstr(s->arch, "-moe")) { /* router and per-expert MLPs */
			const char *e = "model.layers.%" PRId64 ".mlp.experts.%" PRId64 ".%s.weight";
			int64_t mI = s->moe_intermediate;
			r |= ckgen_add(l, p, 2, s->experts, H, "model.layers.%" PRId64 ".mlp.gate.weight",
				       L);
			for (int64_t x = 0; x < s->experts; x++) {
				r |= ckgen_add(l, p, 2, mI, H, e, L, x, "gate_proj") || ckgen_make_fp8(l, B);
				r |= ckgen_add(l, p, 2, mI, H, e, L, x, "up_proj") || ckgen_make_fp8(l, B);
				r |= ckgen_add(l, p, 2, H, mI, e, L, x, "down_proj") || ckgen_make_fp8(l, B);
			}
			if (!strcmp(s->arch, "qwen2-moe")) /* the shared expert and its gate */
				r |= build_shared_expert(s, l, L);
		} else if (phi3) {
			const char *m = "model.layers.%" PRId64 ".mlp.%s.weight";
			r |= ckgen_add(l, p, 2, 2 * I, H, m, L, "gate_up_proj") || ckgen_make_fp8(l, B);
			r |= ckgen_add(l, p, 2, H, I, m, L, "down_proj") || ckgen_make_fp8(l, B);
		} else {
			const char *m = "model.layers.%" PRId64 ".mlp.%s.weight";
			r |= ckgen_add(l, p, 2, I, H, m, L, "gate_proj") || ckgen_make_fp8(l, B);
			r |= ckgen_add(l, p, 2, I, H, m, L, "up_proj") || ckgen_make_fp8(l, B);
			r |= ckgen_add(l, p, 2, H, I, m, L, "down_proj") || ckgen_make_fp8(l, B);
		}
	}
	r |= ckgen_add(l, p, 1, H, 0, "model.norm.weight");
	if (!s->tie)
		r |= ckgen_add(l, p, 2, s->vocab, H, "lm_head.weight");
	return r;
}

static int build_gpt2(const struct ckgen_spec *s, struct glist *l)
{
	const char *p = s->prefix;
	int64_t E = s->hidden, F = s->intermediate;
	int r = ckgen_add(l, p, 2, s->vocab, E, "wte.weight");
	r |= ckgen_add(l, p, 2, s->positions, E, "wpe.weight");
	for (int64_t L = 0; L < s->layers && !r; L++) {
		const char *w = "h.%" PRId64 ".%s.weight", *b = "h.%" PRId64 ".%s.bias";
		r |= ckgen_add(l, p, 1, E, 0, w, L, "ln_1");
		r |= ckgen_add(l, p, 1, E, 0, b, L, "ln_1");
		r |= ckgen_add(l, p, 2, E, 3 * E, w, L, "attn.c_attn");
		r |= ckgen_add(l, p, 1, 3 * E, 0, b, L, "attn.c_attn");
		r |= ckgen_add(l, p, 2, E, E, w, L, "attn.c_proj");
		r |= ckgen_add(l, p, 1, E, 0, b, L, "attn.c_proj");
		r |= ckgen_add(l, p, 1, E, 0, w, L, "ln_2");
		r |= ckgen_add(l, p, 1, E, 0, b, L, "ln_2");
		r |= ckgen_add(l, p, 2, E, F, w, L, "mlp.c_fc");
		r |= ckgen_add(l, p, 1, F, 0, b, L, "mlp.c_fc");
		r |= ckgen_add(l, p, 2, F, E, w, L, "mlp.c_proj");
		r |= ckgen_add(l, p, 1, E, 0, b, L, "mlp.c_proj");
	}
	r |= ckgen_add(l, p, 1, E, 0, "ln_f.weight");
	r |= ckgen_add(l, p, 1, E, 0, "ln_f.bias");
	return r;
}

/* GPT-2's byte-to-unicode map: printable bytes stand for themselves, the
 * others for U+0100 on, in order. Writes the UTF-8 of byte b's symbol. */
static void byte_symbol(unsigned b, char out[4])
{
	unsigned cp = b, k = 0;
	if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) {
		for (unsigned x = 0; x < b; x++)
			k += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
		cp = 256 + k;
	}
	if (cp < 0x80) {
		out[0] = (char)cp, out[1] = 0;
	} else {
		out[0] = (char)(0xC0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3F)), out[2] = 0;
	}
}

#define TOK_BOS "<|begin_of_text|>"
#define TOK_EOS "<|end_of_text|>"
/* Llama 3's pre-tokenizer split pattern */
#define TOK_SPLIT                                                                                  \
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "                          \
	"?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* A byte-level BPE tokenizer.json in Llama 3's style for a vocabulary of
 * s->vocab tokens: the 256 byte symbols, merges of letter pairs filling
 * the ids up to the two special tokens at the end; and a
 * tokenizer_config.json naming them. Only for vocabularies of 258 and up. */
static int write_tokenizer(const struct ckgen_spec *s, const char *outdir, struct ck_err *err)
{
	if (s->vocab < 258 || s->vocab > 256 + 26 * 26 + 2)
		return 0;
	char path[4096];
	snprintf(path, sizeof path, "%s/tokenizer.json", outdir);
	FILE *f = fopen(path, "w");
	if (!f)
		return ck_fail_sys(err, errno, "%s", path);
	int64_t n_merges = s->vocab - 258;
	fprintf(f, "{\"version\": \"1.0\", \"added_tokens\": [\n"
		   "  {\"id\": %" PRId64 ", \"content\": \"" TOK_BOS "\", \"special\": true},\n"
		   "  {\"id\": %" PRId64 ", \"content\": \"" TOK_EOS "\", \"special\": true}],\n"
		   " \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [\n"
		   "  {\"type\": \"Split\", \"pattern\": {\"Regex\": ",
		s->vocab - 2, s->vocab - 1);
	ck_json_fput_str(f, TOK_SPLIT);
	fprintf(f, "}, \"behavior\": \"Isolated\", \"invert\": false},\n"
		   "  {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
		   "\"use_regex\": false}]},\n"
		   " \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
		   "\"trim_offsets\": true, \"use_regex\": true},\n"
		   " \"model\": {\"type\": \"BPE\", \"byte_fallback\": false, \"vocab\": {");
	char sym[4], sym2[4];
	for (unsigned b = 0; b < 256; b++) {
		byte_symbol(b, sym);
		fprintf(f, "%s", b ? ", " : "");
		ck_json_fput_str(f, sym);
		fprintf(f, ": %u", b);
	}
	for (int64_t k = 0; k < n_merges; k++)
		fprintf(f, ", \"%c%c\": %" PRId64, 'a' + (int)(k / 26), 'a' + (int)(k % 26), 256 + k);
	fprintf(f, "},\n  \"merges\": [");
	for (int64_t k = 0; k < n_merges; k++) {
		byte_symbol('a' + (unsigned)(k / 26), sym);
		byte_symbol('a' + (unsigned)(k % 26), sym2);
		fprintf(f, "%s\"%s %s\"", k ? ", " : "", sym, sym2);
	}
	fprintf(f, "]}}\n");
	if (fclose(f) != 0)
		return ck_fail_sys(err, errno, "%s", path);
	snprintf(path, sizeof path, "%s/tokenizer_config.json", outdir);
	if (!(f = fopen(path, "w")))
		return ck_fail_sys(err, errno, "%s", path);
	fprintf(f, "{\"bos_token\": \"" TOK_BOS "\", \"eos_token\": \"" TOK_EOS "\", "
		   "\"add_bos_token\": true,\n \"chat_template\": \"{%% for m in messages %%}{{ "
		   "m['role'] }}: {{ m['content'] }}\\n{%% endfor %%}\"}\n");
	if (fclose(f) != 0)
		return ck_fail_sys(err, errno, "%s", path);
	return 0;
}

/* the Hugging Face class and model_type of the Llama-like models */
static const char *hf_class(const char *arch)
{
	static const char *const names[][2] = {
	    {"mixtral", "MixtralForCausalLM"},	  {"qwen2", "Qwen2ForCausalLM"},
	    {"qwen3", "Qwen3ForCausalLM"},	  {"qwen3-moe", "Qwen3MoeForCausalLM"},
	    {"qwen2-moe", "Qwen2MoeForCausalLM"}, {"olmo2", "Olmo2ForCausalLM"},
	    {"phi3", "Phi3ForCausalLM"},	  {"gemma", "GemmaForCausalLM"},
	    {"gemma2", "Gemma2ForCausalLM"},	  {"gemma3", "Gemma3ForCausalLM"},
	};
	for (size_t i = 0; i < sizeof names / sizeof *names; i++)
		if (!strcmp(arch, names[i][0]))
			return names[i][1];
	return "LlamaForCausalLM";
}

static const char *hf_model_type(const char *arch)
{
	return !strcmp(arch, "qwen3-moe")   ? "qwen3_moe"
	       : !strcmp(arch, "qwen2-moe") ? "qwen2_moe"
	       : !strcmp(arch, "gemma3")    ? "gemma3_text"
					    : arch;
}

/* GeGLU everywhere; Gemma 2's soft caps and sliding window; Gemma 3's
 * sliding window with its own RoPE base on the local layers, no caps.
 * query_pre_attn_scalar is head_dim but on Gemma 3 27B (hidden / heads). */
static void gemma_config(const struct ckgen_spec *s, int generation, FILE *f)
{
	fprintf(f, ",\n  \"hidden_activation\": \"gelu_pytorch_tanh\"");
	if (generation == 2)
		fprintf(f,
			",\n  \"query_pre_attn_scalar\": %" PRId64
			",\n  \"attn_logit_softcapping\": 50.0,\n"
			"  \"final_logit_softcapping\": 30.0,\n  \"sliding_window\": 4096",
			s->head_dim);
	if (generation == 3)
		fprintf(f,
			",\n  \"query_pre_attn_scalar\": %" PRId64
			",\n  \"attn_logit_softcapping\": null,\n"
			"  \"final_logit_softcapping\": null,\n  \"sliding_window\": 512,\n"
			"  \"sliding_window_pattern\": 6,\n  \"rope_local_base_freq\": 10000.0",
			s->head_dim == 128 ? s->hidden / s->heads : s->head_dim);
}

static int write_config(const struct ckgen_spec *s, const char *outdir, struct ck_err *err)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/config.json", outdir);
	FILE *f = fopen(path, "w");
	if (!f)
		return ck_fail_sys(err, errno, "%s", path);
	const char *tdt = s->dtype == CK_DT_BF16  ? "bfloat16"
			  : s->dtype == CK_DT_F16 ? "float16"
						  : "float32";
	if (!strcmp(s->arch, "deepseek-v3")) {
		ckgen_deepseek_config(s, f);
	} else if (!strcmp(s->arch, "gpt-oss")) {
		ckgen_gptoss_config(s, f);
	} else if (!strcmp(s->arch, "gpt2")) {
		fprintf(f,
			"{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": "
			"\"gpt2\",\n  \"n_embd\": %" PRId64 ",\n  \"n_inner\": %" PRId64
			",\n  \"n_layer\": %" PRId64 ",\n  \"n_head\": %" PRId64
			",\n  \"n_positions\": %" PRId64 ",\n  \"vocab_size\": %" PRId64
			",\n  \"layer_norm_epsilon\": 1e-05,\n  \"tie_word_embeddings\": true,\n"
			"  \"torch_dtype\": \"%s\"\n}\n",
			s->hidden, s->intermediate, s->layers, s->heads, s->positions, s->vocab,
			tdt);
	} else {
		int moe = !strcmp(s->arch, "mixtral"), gemma = gemma_generation(s->arch);
		fprintf(f,
			"{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n"
			"  \"hidden_size\": %" PRId64 ",\n  \"intermediate_size\": %" PRId64
			",\n  \"num_hidden_layers\": %" PRId64 ",\n  \"num_attention_heads\": %" PRId64
			",\n  \"num_key_value_heads\": %" PRId64 ",\n  \"vocab_size\": %" PRId64
			",\n  \"rms_norm_eps\": %s,\n  \"rope_theta\": %s,\n"
			"  \"max_position_embeddings\": %" PRId64 ",\n"
			"  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"%s\"",
			hf_class(s->arch), hf_model_type(s->arch), s->hidden, s->intermediate, s->layers,
			s->heads, s->kv_heads, s->vocab, gemma ? "1e-06" : "1e-05",
			gemma == 3 ? "1000000.0" : gemma ? "10000.0" : "500000.0",
			s->positions ? s->positions : 2048, s->tie ? "true" : "false", tdt);
		if (s->head_dim)
			fprintf(f, ",\n  \"head_dim\": %" PRId64, s->head_dim);
		if (gemma)
			gemma_config(s, gemma, f);
		ckgen_quant_config(s, f);
		if (!strcmp(s->arch, "qwen3-moe"))
			fprintf(f,
				",\n  \"num_experts\": %" PRId64 ",\n  \"num_experts_per_tok\": %d"
				",\n  \"moe_intermediate_size\": %" PRId64
				",\n  \"decoder_sparse_step\": 1,\n  \"mlp_only_layers\": [],\n"
				"  \"norm_topk_prob\": true",
				s->experts, s->experts >= 8 ? 8 : 2, s->moe_intermediate);
		if (!strcmp(s->arch, "qwen2-moe")) /* Qwen1.5-MoE: top-4 of 60, raw weights */
			fprintf(f,
				",\n  \"num_experts\": %" PRId64 ",\n  \"num_experts_per_tok\": %d"
				",\n  \"moe_intermediate_size\": %" PRId64
				",\n  \"shared_expert_intermediate_size\": %" PRId64
				",\n  \"decoder_sparse_step\": 1,\n  \"mlp_only_layers\": [],\n"
				"  \"norm_topk_prob\": false",
				s->experts, s->experts >= 8 ? 4 : 2, s->moe_intermediate,
				s->intermediate);
		if (moe)
			fprintf(f, ",\n  \"num_local_experts\": %" PRId64
				   ",\n  \"num_experts_per_tok\": 2",
				s->experts);
		fprintf(f, "\n}\n");
	}
	if (fclose(f) != 0)
		return ck_fail_sys(err, errno, "%s", path);
	return 0;
}

static void encode(enum ck_dtype dt, double v, unsigned char *out)
{
	float f = (float)v;
	uint16_t h;
	switch (dt) {
	case CK_DT_F8_E4M3:
		out[0] = ck_f32_to_e4m3(f, 0);
		break;
	case CK_DT_F16:
		h = ck_f32_to_f16(f, 0);
		memcpy(out, &h, 2);
		break;
	case CK_DT_BF16:
		h = ck_f32_to_bf16(f, 0);
		memcpy(out, &h, 2);
		break;
	default:
		memcpy(out, &f, 4);
	}
}

static int write_data(int fd, const struct gtensor *t, enum ck_dtype dt, uint64_t off,
		      uint64_t numel, const char *path, struct ck_err *err)
{
	enum { CHUNK = 1 << 16 };
	size_t es = ck_dtype_size(dt);
	unsigned char *buf = malloc(CHUNK * es);
	if (!buf)
		return ck_fail_sys(err, ENOMEM, "%s", path);
	uint64_t h = t->seed;
	for (uint64_t i = 0; i < numel; i += CHUNK) {
		uint64_t n = numel - i < CHUNK ? numel - i : CHUNK;
		for (uint64_t j = 0; j < n; j++) {
			if (t->kind == G_MXBLOCKS || t->kind == G_MXSCALES) { /* see ckgen.h */
				uint64_t x = ckgen_splitmix64(h + i + j);
				buf[j] = (unsigned char)(t->kind == G_MXBLOCKS ? x & 0xFF : 120 + x % 9);
				continue;
			}
			uint64_t r = ckgen_splitmix64(h + i + j) % 255;
			double v = t->kind == G_SCALE ? ((double)r + 1.0) / 64.0 : ((double)r - 127.0) / 64.0;
			encode(dt, v, buf + j * es);
		}
		if (pwrite(fd, buf, n * es, (off_t)(off + i * es)) != (ssize_t)(n * es)) {
			free(buf);
			return ck_fail_sys(err, errno ? errno : EIO, "%s: write failed", path);
		}
	}
	free(buf);
	return 0;
}

static int write_shard(const struct ckgen_spec *s, const struct gtensor *t, size_t n,
		       const char *path, struct ck_err *err)
{
	struct ck_st_out *o = calloc(n ? n : 1, sizeof *o);
	uint64_t *off = calloc(n ? n : 1, sizeof *off);
	char *hdr = NULL;
	size_t hl = 0;
	int rc = -1, fd = -1;
	if (!o || !off) {
		ck_fail_sys(err, ENOMEM, "%s", path);
		goto out;
	}
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++) {
		o[i].name = t[i].name;
		o[i].dtype = gdtype(s, &t[i]);
		o[i].ndim = t[i].ndim;
		o[i].shape = t[i].shape;
		ck_shape_bytes(t[i].shape, t[i].ndim, o[i].dtype, &o[i].nbytes);
		total += o[i].nbytes;
	}
	const char *mk[] = {"format"}, *mv[] = {"pt"};
	if (ck_st_build_header(o, n, mk, mv, 1, &hdr, &hl, off, err) < 0)
		goto out;
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		ck_fail_sys(err, errno, "%s", path);
		goto out;
	}
	if (write(fd, hdr, hl) != (ssize_t)hl || ftruncate(fd, (off_t)(hl + total)) < 0) {
		ck_fail_sys(err, errno ? errno : EIO, "%s: write failed", path);
		goto out;
	}
	for (size_t i = 0; i < n && !s->sparse; i++)
		if (write_data(fd, &t[i], o[i].dtype, hl + off[i], o[i].nbytes / ck_dtype_size(o[i].dtype),
			       path, err) < 0)
			goto out;
	rc = 0;
out:
	if (fd >= 0 && close(fd) < 0 && rc == 0)
		rc = ck_fail_sys(err, errno, "%s", path);
	free(hdr);
	free(o);
	free(off);
	return rc;
}

int ckgen_write(const struct ckgen_spec *s, const char *outdir, struct ck_err *err)
{
	if (s->hidden <= 0 || s->layers < 0 || s->heads <= 0 || s->vocab <= 0 ||
	    s->kv_heads <= 0 || s->heads % s->kv_heads || s->shards < 1 ||
	    (!s->head_dim && s->hidden % s->heads) || s->intermediate < 0 || s->experts < 0 ||
	    s->moe_intermediate < 0 || s->shared_experts < 0 || s->first_dense < 0 ||
	    s->mtp_layers < 0 || s->q_lora < 0)
		return ck_fail(err, CK_E_USAGE, "inconsistent model sizes");
	if ((strstr(s->arch, "-moe") || !strcmp(s->arch, "deepseek-v3")) &&
	    (s->experts <= 0 || s->moe_intermediate <= 0))
		return ck_fail(err, CK_E_USAGE, "a MoE model needs --experts and --moe-intermediate");
	if (!strcmp(s->arch, "gpt-oss") &&
	    (s->experts <= 0 || (s->mxfp4 && (s->hidden % 32 || s->intermediate % 32))))
		return ck_fail(err, CK_E_USAGE, "gpt-oss needs --experts, and with MXFP4 a hidden and "
						"intermediate size that are multiples of 32");
	if (mkdir(outdir, 0755) < 0 && errno != EEXIST)
		return ck_fail_sys(err, errno, "%s", outdir);
	struct glist l = {0};
	int r = !strcmp(s->arch, "gpt2")	       ? build_gpt2(s, &l)
		: !strcmp(s->arch, "deepseek-v3") ? ckgen_build_deepseek(s, &l)
		: !strcmp(s->arch, "gpt-oss")	  ? ckgen_build_gptoss(s, &l)
						  : build_llama(s, &l);
	if (r) {
		free(l.t);
		return ck_fail_sys(err, ENOMEM, "tensor list");
	}
	uint64_t total = 0;
	for (size_t i = 0; i < l.n; i++) {
		uint64_t nb;
		ck_shape_bytes(l.t[i].shape, l.t[i].ndim, gdtype(s, &l.t[i]), &nb);
		total += nb;
	}
	int shards = (size_t)s->shards > l.n ? (int)l.n : s->shards;
	char path[4096];
	FILE *idx = NULL;
	if (shards > 1) {
		snprintf(path, sizeof path, "%s/model.safetensors.index.json", outdir);
		if (!(idx = fopen(path, "w"))) {
			free(l.t);
			return ck_fail_sys(err, errno, "%s", path);
		}
		fprintf(idx, "{\n  \"metadata\": {\n    \"total_size\": %" PRIu64
			     "\n  },\n  \"weight_map\": {",
			total);
	}
	/* Fill shards in key order, each up to an even share of the bytes. */
	size_t start = 0;
	int rc = 0;
	uint64_t done = 0;
	for (int k = 0; k < shards && rc == 0; k++) {
		size_t end = start;
		uint64_t goal = total / (uint64_t)shards * (uint64_t)(k + 1);
		while (end < l.n && (end == start || done < goal || k == shards - 1) &&
		       l.n - end > (size_t)(shards - k - 1)) {
			uint64_t nb;
			ck_shape_bytes(l.t[end].shape, l.t[end].ndim, gdtype(s, &l.t[end]), &nb);
			done += nb;
			end++;
		}
		char name[64];
		if (shards == 1)
			snprintf(name, sizeof name, "model.safetensors");
		else
			ck_st_shard_name(name, sizeof name, (uint64_t)k + 1, (uint64_t)shards);
		snprintf(path, sizeof path, "%s/%s", outdir, name);
		rc = write_shard(s, l.t + start, end - start, path, err);
		for (size_t i = start; idx && i < end; i++)
			fprintf(idx, "%s\n    \"%s\": \"%s\"", i ? "," : "", l.t[i].name, name);
		start = end;
	}
	if (idx) {
		fprintf(idx, "\n  }\n}\n");
		if (fclose(idx) != 0 && rc == 0)
			rc = ck_fail_sys(err, errno, "index");
	}
	free(l.t);
	if (rc)
		return rc;
	if (write_config(s, outdir, err) < 0)
		return -1;
	return strcmp(s->arch, "gpt2") ? write_tokenizer(s, outdir, err) : 0;
}
