#include "gguf.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml_types.h"
#include "../util/fileio.h"
#include "../util/strmap.h"

#define MAX_TENSORS (1u << 20)
#define MAX_KV (1u << 20)
#define MAX_STRING (1u << 26)
#define MAX_NAME 256
#define MAX_ARRAY_KEPT 64
#define MAX_ARRAY_DEPTH 4

enum { T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STRING, T_ARRAY, T_U64, T_I64,
       T_F64, T_COUNT };

static const unsigned scalar_size[T_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
static const char *const type_name[T_COUNT] = {"u8",  "i8",   "u16",    "i16",   "u32",
					       "i32", "f32",  "bool",   "string", "array",
					       "u64", "i64",  "f64"};

/* A buffered reader over the file: every read is bounded by its size. */
struct rd {
	int fd;
	uint64_t size, pos;
	const char *what;
	struct ck_err *err;
	struct ck_gguf_kvs *tok; /* NULL: not kept */
	unsigned char buf[1 << 16];
	uint64_t buf_off;
	size_t buf_len;
};

static int rd_bytes(struct rd *r, void *dst, uint64_t n)
{
	if (n > r->size - r->pos)
		return ck_fail(r->err, CK_E_SOURCE, "%s: GGUF header runs past the end of the file "
						    "(at byte %llu)",
			       r->what, (unsigned long long)r->pos);
	unsigned char *d = dst;
	while (n) {
		if (r->pos < r->buf_off || r->pos >= r->buf_off + r->buf_len) {
			uint64_t left = r->size - r->pos;
			size_t want = left < sizeof r->buf ? (size_t)left : sizeof r->buf;
			int e = ck_pread_full(r->fd, r->buf, want, r->pos);
			if (e < 0)
				return ck_fail_sys(r->err, -e, "%s: cannot read", r->what);
			r->buf_off = r->pos;
			r->buf_len = want;
		}
		size_t at = (size_t)(r->pos - r->buf_off), k = r->buf_len - at;
		if (k > n)
			k = (size_t)n;
		if (d) {
			memcpy(d, r->buf + at, k);
			d += k;
		}
		r->pos += k;
		n -= k;
	}
	return 0;
}

static int rd_u32(struct rd *r, uint32_t *v)
{
	unsigned char b[4];
	if (rd_bytes(r, b, 4) < 0)
		return -1;
	*v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
	return 0;
}

static int rd_u64(struct rd *r, uint64_t *v)
{
	unsigned char b[8];
	if (rd_bytes(r, b, 8) < 0)
		return -1;
	*v = 0;
	for (int i = 7; i >= 0; i--)
		*v = *v << 8 | b[i];
	return 0;
}

/* A string: u64 length and bytes; NUL bytes inside are refused. */
static int rd_string(struct rd *r, uint64_t max, char **out)
{
	uint64_t n;
	if (rd_u64(r, &n) < 0)
		return -1;
	if (n > max || n > r->size - r->pos)
		return ck_fail(r->err, CK_E_SOURCE, "%s: GGUF string of %llu bytes at byte %llu %s",
			       r->what, (unsigned long long)n, (unsigned long long)r->pos,
			       n > max ? "is too long" : "runs past the end of the file");
	char *s = malloc(n + 1);
	if (!s)
		return ck_fail_sys(r->err, ENOMEM, "%s", r->what);
	if (rd_bytes(r, s, n) < 0) {
		free(s);
		return -1;
	}
	s[n] = '\0';
	if (strlen(s) != n) {
		free(s);
		return ck_fail(r->err, CK_E_SOURCE, "%s: GGUF string with a NUL byte at byte %llu",
			       r->what, (unsigned long long)r->pos);
	}
	*out = s;
	return 0;
}

static cJSON *scalar_json(const unsigned char *b, uint32_t t)
{
	int64_t i = 0;
	uint64_t u = 0;
	switch (t) {
	case T_U8: return cJSON_CreateNumber(b[0]);
	case T_I8: return cJSON_CreateNumber((int8_t)b[0]);
	case T_BOOL: return cJSON_CreateBool(b[0] != 0);
	case T_U16: return cJSON_CreateNumber((uint16_t)(b[0] | b[1] << 8));
	case T_I16: return cJSON_CreateNumber((int16_t)(b[0] | b[1] << 8));
	case T_F32: {
		uint32_t x = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
			     (uint32_t)b[3] << 24;
		float f;
		memcpy(&f, &x, 4);
		/* the shortest decimal that reads back as the same float: 1e-05,
		 * not 9.99999974737875e-06 */
		char txt[32];
		for (int prec = 1; prec <= 9; prec++) {
			snprintf(txt, sizeof txt, "%.*g", prec, (double)f);
			if ((float)strtod(txt, NULL) == f || f != f)
				break;
		}
		return cJSON_CreateNumber(f != f ? 0 : strtod(txt, NULL));
	}
	case T_F64: {
		double d;
		memcpy(&d, b, 8);
		return cJSON_CreateNumber(d);
	}
	default: break;
	}
	for (int k = (int)scalar_size[t] - 1; k >= 0; k--)
		u = u << 8 | b[k];
	if (t == T_U32 || t == T_U64)
		return cJSON_CreateNumber((double)u);
	i = t == T_I32 ? (int32_t)(uint32_t)u : (int64_t)u;
	return cJSON_CreateNumber((double)i);
}

/* One value of type t; *out NULL when it is not kept. */
static int rd_value(struct rd *r, uint32_t t, int depth, cJSON **out)
{
	*out = NULL;
	if (t >= T_COUNT)
		return ck_fail(r->err, CK_E_SOURCE, "%s: GGUF value type %u at byte %llu is unknown",
			       r->what, t, (unsigned long long)r->pos);
	if (t == T_STRING) {
		char *s;
		if (rd_string(r, MAX_STRING, &s) < 0)
			return -1;
		*out = cJSON_CreateString(s);
		free(s);
		return *out ? 0 : ck_fail_sys(r->err, ENOMEM, "%s", r->what);
	}
	if (t != T_ARRAY) {
		unsigned char b[8];
		if (rd_bytes(r, b, scalar_size[t]) < 0)
			return -1;
		*out = scalar_json(b, t);
		return *out ? 0 : ck_fail_sys(r->err, ENOMEM, "%s", r->what);
	}
	uint32_t et;
	uint64_t n;
	if (depth >= MAX_ARRAY_DEPTH)
		return ck_fail(r->err, CK_E_SOURCE, "%s: GGUF arrays nested deeper than %d",
			       r->what, MAX_ARRAY_DEPTH);
	if (rd_u32(r, &et) < 0 || rd_u64(r, &n) < 0)
		return -1;
	if (et >= T_COUNT)
		return ck_fail(r->err, CK_E_SOURCE, "%s: GGUF array of unknown type %u", r->what, et);
	/* every element takes at least a byte (strings 8): bounded by the file */
	uint64_t least = et == T_STRING || et == T_ARRAY ? 8 : scalar_size[et];
	if (n > (r->size - r->pos) / least)
		return ck_fail(r->err, CK_E_SOURCE, "%s: GGUF array of %llu %s runs past the end of "
						    "the file",
			       r->what, (unsigned long long)n, type_name[et]);
	int keep = n <= MAX_ARRAY_KEPT;
	cJSON *arr = keep ? cJSON_CreateArray() : NULL;
	if (keep && !arr)
		return ck_fail_sys(r->err, ENOMEM, "%s", r->what);
	for (uint64_t i = 0; i < n; i++) {
		cJSON *v = NULL;
		if (keep || et == T_STRING || et == T_ARRAY) {
			if (rd_value(r, et, depth + 1, &v) < 0) {
				cJSON_Delete(arr);
				return -1;
			}
		} else if (rd_bytes(r, NULL, scalar_size[et]) < 0) {
			return -1;
		}
		if (keep)
			cJSON_AddItemToArray(arr, v);
		else
			cJSON_Delete(v);
	}
	if (!keep) { /* a vocabulary: say what it is, not every entry */
		arr = cJSON_CreateObject();
		if (!arr || !cJSON_AddStringToObject(arr, "type", type_name[et]) ||
		    !cJSON_AddNumberToObject(arr, "count", (double)n)) {
			cJSON_Delete(arr);
			return ck_fail_sys(r->err, ENOMEM, "%s", r->what);
		}
	}
	*out = arr;
	return 0;
}

int ck_is_gguf(const unsigned char *p, size_t n)
{
	return n >= 4 && !memcmp(p, "GGUF", 4);
}

/* ggml types ckptfs reads, and the names of those it does not */
static enum ck_dtype ggml_dtype(uint32_t t)
{
	switch (t) {
	case 0: return CK_DT_F32;
	case 1: return CK_DT_F16;
	case 24: return CK_DT_I8;
	case 25: return CK_DT_I16;
	case 26: return CK_DT_I32;
	case 27: return CK_DT_I64;
	case 28: return CK_DT_F64;
	case 30: return CK_DT_BF16;
	default: return CK_DT_INVALID;
	}
}

static int cmp_off(const void *a, const void *b)
{
	const struct ck_tensor_info *x = a, *y = b;
	return (x->offset > y->offset) - (x->offset < y->offset);
}

static int read_infos(struct rd *r, uint64_t n, struct ck_file_tensors *out)
{
	if (!(out->tensors = calloc(n ? n : 1, sizeof *out->tensors)))
		return ck_fail_sys(r->err, ENOMEM, "%s", r->what);
	for (uint64_t i = 0; i < n; i++) {
		struct ck_tensor_info *t = &out->tensors[out->n_tensors];
		uint32_t nd, type;
		uint64_t dims[4], off;
		if (rd_string(r, MAX_NAME, &t->name) < 0)
			return -1;
		out->n_tensors++; /* counted once it owns its name */
		if (rd_u32(r, &nd) < 0)
			return -1;
		if (nd < 1 || nd > 4)
			return ck_fail(r->err, CK_E_SOURCE, "%s: tensor \"%s\": %u dims (1 to 4)",
				       r->what, t->name, nd);
		for (uint32_t d = 0; d < nd; d++)
			if (rd_u64(r, &dims[d]) < 0)
				return -1;
		if (rd_u32(r, &type) < 0 || rd_u64(r, &off) < 0)
			return -1;
		size_t qk = 0, qb = 0;
		t->dtype = ggml_dtype(type);
		if (t->dtype == CK_DT_INVALID && ck_ggml_block(type, &qk, &qb)) {
			t->dtype = CK_DT_F32; /* decoded on read */
			t->quant = type;
		}
		if (t->dtype == CK_DT_INVALID)
			return ck_fail(
			    r->err, CK_E_SOURCE,
			    "%s: tensor \"%s\": ggml type %s (%u) is not supported (F32, "
			    "F16, BF16, F64, I8-I64, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K-Q6_K, "
			    "IQ4_NL, IQ4_XS and MXFP4 are)",
			    r->what, t->name, ck_ggml_type_name(type), type);
		if (qk && dims[0] % qk)
			return ck_fail(r->err, CK_E_SOURCE,
				       "%s: tensor \"%s\": rows of %llu do not divide into %s blocks of %zu",
				       r->what, t->name, (unsigned long long)dims[0],
				       ck_ggml_type_name(type), qk);
		t->ndim = (int)nd;
		for (uint32_t d = 0; d < nd; d++) { /* GGUF lists the fastest dim first */
			if (dims[d] > (uint64_t)1 << 48)
				return ck_fail(r->err, CK_E_SOURCE, "%s: tensor \"%s\": dim %llu is too "
								    "large",
					       r->what, t->name, (unsigned long long)dims[d]);
			t->shape[nd - 1 - d] = (int64_t)dims[d];
		}
		if (ck_shape_numel(t->shape, t->ndim, &t->numel) < 0 ||
		    ck_shape_bytes(t->shape, t->ndim, t->dtype, &t->nbytes) < 0)
			return ck_fail(r->err, CK_E_SOURCE, "%s: tensor \"%s\": size overflows",
				       r->what, t->name);
		t->qbytes = qk ? t->numel / qk * qb : t->nbytes; /* the bytes in the file */
		t->offset = off; /* relative to the data section until it is known */
	}
	return 0;
}

void ck_gguf_kvs_free(struct ck_gguf_kvs *k)
{
	for (size_t i = 0; i < k->n; i++)
		free(k->kv[i].key);
	free(k->kv);
	free(k->bytes);
	memset(k, 0, sizeof *k);
}

/* Remember where the record of key (from byte start to r->pos) lies. */
static int keep_record(struct rd *r, const char *key, uint64_t start)
{
	struct ck_gguf_kvs *k = r->tok;
	if (k->n == k->cap) {
		size_t cap = k->cap ? 2 * k->cap : 16;
		struct ck_gguf_kv *kv = realloc(k->kv, cap * sizeof *kv);
		if (!kv)
			return ck_fail_sys(r->err, ENOMEM, "%s", r->what);
		k->kv = kv, k->cap = cap;
	}
	char *dup = strdup(key);
	if (!dup)
		return ck_fail_sys(r->err, ENOMEM, "%s", r->what);
	k->kv[k->n++] = (struct ck_gguf_kv){dup, (size_t)start, (size_t)(r->pos - start)};
	return 0;
}

/* The kept records' bytes, read again from the file into one buffer (their
 * offsets become offsets in it). Bounded by the file: each record was read
 * whole by the parse. */
static int copy_records(struct rd *r)
{
	struct ck_gguf_kvs *k = r->tok;
	size_t total = 0;
	for (size_t i = 0; i < k->n; i++)
		total += k->kv[i].len;
	if (!k->n)
		return 0;
	if (!(k->bytes = malloc(total)))
		return ck_fail_sys(r->err, ENOMEM, "%s", r->what);
	size_t at = 0;
	for (size_t i = 0; i < k->n; i++) {
		int e = ck_pread_full(r->fd, k->bytes + at, k->kv[i].len, k->kv[i].off);
		if (e < 0)
			return ck_fail_sys(r->err, -e, "%s: cannot read", r->what);
		k->kv[i].off = at;
		at += k->kv[i].len;
	}
	return 0;
}

/* The n_kv metadata values into m (each key once); *alignment from
 * general.alignment, a power of two; the tokenizer.* records kept when
 * r->tok asks for them. */
static int read_metadata(struct rd *r, uint64_t n_kv, cJSON *m, uint64_t *alignment)
{
	struct ck_strmap keys = {0}; /* duplicate keys in O(1) each */
	if (ck_strmap_init(&keys, 64) < 0)
		return ck_fail_sys(r->err, ENOMEM, "%s", r->what);
	int rc = 0;
	for (uint64_t i = 0; i < n_kv && rc == 0; i++) {
		char *key;
		uint32_t t;
		cJSON *v;
		uint64_t start = r->pos;
		if (rd_string(r, MAX_STRING, &key) < 0) {
			rc = -1;
			break;
		}
		if (rd_u32(r, &t) < 0 || rd_value(r, t, 0, &v) < 0) {
			free(key);
			rc = -1;
			break;
		}
		cJSON_AddItemToObject(m, key, v);
		int dup = ck_strmap_put(&keys, v->string, 0, NULL);
		double a = cJSON_IsNumber(v) ? v->valuedouble : 0;
		if (dup < 0)
			rc = ck_fail_sys(r->err, ENOMEM, "%s", r->what);
		else if (dup > 0)
			rc = ck_fail(r->err, CK_E_SOURCE, "%s: GGUF metadata key \"%s\" appears twice",
				     r->what, key);
		else if (!strcmp(key, "general.alignment") &&
			 (t != T_U32 || a < 1 || a > (1 << 20) || ((uint64_t)a & ((uint64_t)a - 1))))
			rc = ck_fail(r->err, CK_E_SOURCE,
				     "%s: general.alignment must be a power of two (u32, at most 2^20)",
				     r->what);
		else if (!strcmp(key, "general.alignment"))
			*alignment = (uint64_t)a;
		else if (r->tok && !strncmp(key, "tokenizer.", 10))
			rc = keep_record(r, key, start);
		free(key);
	}
	ck_strmap_free(&keys);
	return rc < 0 || (r->tok && copy_records(r) < 0) ? -1 : 0;
}

/* The tensors' offsets, relative to the aligned data section, made
 * absolute; each inside the file, aligned, and no two overlapping. */
static int place_tensors(struct ck_file_tensors *out, uint64_t pos, uint64_t size,
			 uint64_t alignment, const char *what, struct ck_err *err)
{
	uint64_t data = (pos + alignment - 1) / alignment * alignment;
	if (data > size && !out->n_tensors)
		data = size; /* a vocabulary-only file need not pad an empty data section */
	if (data > size)
		return ck_fail(err, CK_E_SOURCE, "%s: GGUF data section starts past the end of the file",
			       what);
	for (size_t i = 0; i < out->n_tensors; i++) {
		struct ck_tensor_info *t = &out->tensors[i];
		if (t->offset % alignment || t->offset > size - data ||
		    t->qbytes > size - data - t->offset)
			return ck_fail(err, CK_E_SOURCE,
				       "%s: tensor \"%s\": data at %llu (%llu bytes) is misaligned or "
				       "runs past the end of the file",
				       what, t->name, (unsigned long long)t->offset,
				       (unsigned long long)t->qbytes);
		t->offset += data;
	}
	qsort(out->tensors, out->n_tensors, sizeof *out->tensors, cmp_off);
	for (size_t i = 1; i < out->n_tensors; i++)
		if (out->tensors[i - 1].offset + out->tensors[i - 1].qbytes > out->tensors[i].offset)
			return ck_fail(err, CK_E_SOURCE, "%s: tensors \"%s\" and \"%s\" overlap", what,
				       out->tensors[i - 1].name, out->tensors[i].name);
	out->header_len = data;
	return 0;
}

int ck_gguf_read_fd(int fd, uint64_t size, const char *what, struct ck_file_tensors *out,
		    cJSON **meta, struct ck_gguf_kvs *tok, struct ck_err *err)
{
	memset(out, 0, sizeof *out);
	*meta = NULL;
	if (tok)
		memset(tok, 0, sizeof *tok);
	struct rd *r = calloc(1, sizeof *r);
	cJSON *m = r ? cJSON_CreateObject() : NULL;
	if (!r || !m) {
		free(r);
		return ck_fail_sys(err, ENOMEM, "%s", what);
	}
	r->fd = fd, r->size = size, r->what = what, r->err = err, r->tok = tok;
	int rc = -1;
	unsigned char magic[4];
	uint32_t version;
	uint64_t n_tensors, n_kv, alignment = 32;
	if (rd_bytes(r, magic, 4) < 0 || rd_u32(r, &version) < 0)
		goto out;
	if (!ck_is_gguf(magic, 4) || version < 2 || version > 3) {
		ck_fail(err, CK_E_SOURCE, "%s: GGUF version %u is not supported (2 or 3)", what,
			version);
		goto out;
	}
	if (rd_u64(r, &n_tensors) < 0 || rd_u64(r, &n_kv) < 0)
		goto out;
	if (n_tensors > MAX_TENSORS || n_kv > MAX_KV) {
		ck_fail(err, CK_E_SOURCE, "%s: GGUF counts %llu tensors, %llu values (at most %u each)",
			what, (unsigned long long)n_tensors, (unsigned long long)n_kv, MAX_TENSORS);
		goto out;
	}
	if (read_metadata(r, n_kv, m, &alignment) < 0 || read_infos(r, n_tensors, out) < 0 ||
	    place_tensors(out, r->pos, size, alignment, what, err) < 0)
		goto out;
	*meta = m;
	m = NULL;
	rc = 0;
out:
	cJSON_Delete(m);
	if (rc < 0) {
		ck_file_tensors_free(out);
		if (tok)
			ck_gguf_kvs_free(tok);
	}
	free(r);
	return rc;
}

static double num(const cJSON *meta, const char *arch, const char *key, int *ok)
{
	char k[160];
	snprintf(k, sizeof k, "%s.%s", arch, key);
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(meta, k);
	if (!cJSON_IsNumber(v)) {
		*ok = 0;
		return 0;
	}
	return v->valuedouble;
}

/* The GGUF architectures a config.json is made for: the class and
 * model_type transformers reads (a llama GGUF with experts is Mixtral). */
static const struct {
	const char *gguf, *hf, *type;
} HF_ARCHS[] = {
    {"llama", "LlamaForCausalLM", "llama"},
    {"qwen2", "Qwen2ForCausalLM", "qwen2"},
    {"qwen3", "Qwen3ForCausalLM", "qwen3"},
    {"qwen3moe", "Qwen3MoeForCausalLM", "qwen3_moe"},
    {"qwen2moe", "Qwen2MoeForCausalLM", "qwen2_moe"},
    {"gpt-oss", "GptOssForCausalLM", "gpt_oss"},
    {"olmo2", "Olmo2ForCausalLM", "olmo2"},
    {"smollm3", "SmolLM3ForCausalLM", "smollm3"},
    {"command-r", "CohereForCausalLM", "cohere"},
    {"phi3", "Phi3ForCausalLM", "phi3"},
    {"gemma", "GemmaForCausalLM", "gemma"},
    {"gemma2", "Gemma2ForCausalLM", "gemma2"},
    {"gemma3", "Gemma3ForCausalLM", "gemma3_text"},
    {"granite", "GraniteForCausalLM", "granite"},
};

/* IBM Granite's four scalars as Hugging Face names them. Without the
 * attention scale llama.cpp takes 1/sqrt(head_dim), Hugging Face 1: the
 * config says which; the others are 1 in both when absent. */
static void granite_fields(const cJSON *meta, double head, cJSON *c)
{
	static const char *const key[4] = {"attention.scale", "embedding_scale", "residual_scale",
					   "logit_scale"};
	static const char *const hf[4] = {"attention_multiplier", "embedding_multiplier",
					  "residual_multiplier", "logits_scaling"};
	for (int k = 0; k < 4; k++) {
		int ok = 1;
		double v = num(meta, "granite", key[k], &ok);
		cJSON_AddNumberToObject(c, hf[k], ok && v != 0 ? v : k ? 1 : 1 / sqrt(head));
	}
}

/* What Hugging Face's Gemma classes read that llama.cpp keeps in the
 * metadata or fixes in its code: the tanh GELU; head_dim always (the
 * classes default to 256); Gemma 2's caps (llama.cpp's defaults 50 and 30
 * when absent) and window (4096); Gemma 3's window, 5:1 layer pattern and
 * local base 10000, no caps; the query scale llama.cpp applies,
 * 1/sqrt(head_dim), but 1/sqrt(hidden / heads) for the 27B types (46 layers
 * in Gemma 2, 62 in Gemma 3). */
static void gemma_fields(const cJSON *meta, const char *g, double hidden, double heads,
			 double layers, double head, cJSON *c)
{
	cJSON_AddStringToObject(c, "hidden_act", "gelu_pytorch_tanh");
	cJSON_AddStringToObject(c, "hidden_activation", "gelu_pytorch_tanh");
	if (!cJSON_GetObjectItemCaseSensitive(c, "head_dim"))
		cJSON_AddNumberToObject(c, "head_dim", head);
	if (!strcmp(g, "gemma"))
		return;
	int g3 = !strcmp(g, "gemma3"), ok = 1;
	double swa = num(meta, g, "attention.sliding_window", &ok);
	cJSON_AddNumberToObject(c, "sliding_window", ok && swa > 0 ? swa : 4096);
	cJSON_AddNumberToObject(c, "query_pre_attn_scalar",
				layers == (g3 ? 62 : 46) ? floor(hidden / heads) : head);
	if (!g3) {
		static const char *const caps[2] = {"attn_logit_softcapping",
						    "final_logit_softcapping"};
		for (int k = 0; k < 2; k++) {
			int okc = 1;
			double v = num(meta, g, caps[k], &okc);
			cJSON_AddNumberToObject(c, caps[k], okc ? v : k ? 30 : 50);
		}
		return;
	}
	cJSON_AddNullToObject(c, "attn_logit_softcapping");
	cJSON_AddNullToObject(c, "final_logit_softcapping");
	cJSON_AddNumberToObject(c, "rope_local_base_freq", 10000);
	cJSON_AddNumberToObject(c, "sliding_window_pattern", 6);
	cJSON *types = cJSON_AddArrayToObject(c, "layer_types");
	for (int i = 0; types && i < 65536 && i < layers; i++) /* layers a double: no cast */
		cJSON_AddItemToArray(types, cJSON_CreateString((i + 1) % 6 ? "sliding_attention"
									   : "full_attention"));
}

/* rope.scaling.* (linear, yarn) as config.json's rope_scaling. */
static void rope_scaling(const cJSON *meta, const char *arch, cJSON *c)
{
	char k[160];
	snprintf(k, sizeof k, "%s.rope.scaling.type", arch);
	const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(meta, k));
	int ok = 1;
	double factor = num(meta, arch, "rope.scaling.factor", &ok);
	if (!type || !ok || !strcmp(type, "none"))
		return;
	cJSON *rs = cJSON_AddObjectToObject(c, "rope_scaling");
	cJSON_AddStringToObject(rs, "rope_type", type);
	cJSON_AddNumberToObject(rs, "factor", factor);
	double orig = num(meta, arch, "rope.scaling.original_context_length", &ok);
	if (ok)
		cJSON_AddNumberToObject(rs, "original_max_position_embeddings", orig);
}

/* The rope divisors as rope_scaling of type longrope (see gguf.h); att < 0:
 * no attention_factor (Hugging Face derives it as llama.cpp's converter
 * does). factor: what Hugging Face reads when the config has no
 * original_max_position_embeddings (it fails without one there). */
static void longrope(const float *longf, size_t nl, const float *shortf, size_t ns, double att,
		     double factor, cJSON *c)
{
	cJSON *rs = cJSON_AddObjectToObject(c, "rope_scaling");
	cJSON_AddStringToObject(rs, "rope_type", "longrope");
	const float *f[2] = {longf, shortf};
	size_t n[2] = {nl, ns};
	for (int k = 0; k < 2; k++) {
		cJSON *l = cJSON_AddArrayToObject(rs, k ? "short_factor" : "long_factor");
		for (size_t i = 0; i < n[k]; i++)
			cJSON_AddItemToArray(l, cJSON_CreateNumber(f[k][i]));
	}
	cJSON_AddNumberToObject(rs, "factor", factor);
	if (att >= 0)
		cJSON_AddNumberToObject(rs, "attention_factor", att);
}

/* rope.dimension_count against the head. Hugging Face's Phi-3 rotates the
 * first int(head_dim * partial_rotary_factor) dims (Phi-4-mini: 96 of 128),
 * which are the ones llama.cpp's phi3 rotates; the other architectures
 * rotate the whole head in Hugging Face, so a GGUF of theirs that rotates
 * less is refused rather than described as another model. The divisor
 * lists hold one number per rotated pair, as both read them. */
static int rotary(const cJSON *meta, const char *g, double head, const struct ck_gguf_rope *rope,
		  cJSON *c, const char *what, struct ck_err *err)
{
	int ok = 1;
	double rot = num(meta, g, "rope.dimension_count", &ok);
	if (!ok)
		rot = head;
	if (!(head >= 2 && head <= 65536 && head == floor(head)))
		return ck_fail(err, CK_E_SOURCE,
			       "%s: %s's head has %g dims (attention.key_length, else "
			       "embedding_length / attention.head_count): must be a whole number "
			       "from 2 to 65536",
			       what, g, head);
	if (!(rot >= 2 && rot <= head && fmod(rot, 2) == 0))
		return ck_fail(err, CK_E_SOURCE,
			       "%s: %s.rope.dimension_count %g: must be even, from 2 to the "
			       "head's %g dims",
			       what, g, rot, head);
	if (rot < head && strcmp(g, "phi3"))
		return ck_fail(err, CK_E_SOURCE,
			       "%s: %s.rope.dimension_count %g rotates part of the head's %g "
			       "dims: Hugging Face's %s rotates all of them",
			       what, g, rot, head, g);
	if (rot < head) {
		double f = rot / head;
		if (floor(head * f) != rot)
			return ck_fail(err, CK_E_SOURCE,
				       "%s: phi3.rope.dimension_count %g of %g dims is no "
				       "partial_rotary_factor Hugging Face rounds back to it",
				       what, rot, head);
		cJSON_AddNumberToObject(c, "partial_rotary_factor", f);
	}
	static const char *const names[3] = {"rope_freqs.weight", "rope_factors_long.weight",
					     "rope_factors_short.weight"};
	size_t n[3] = {rope ? rope->n_freqs : 0, rope ? rope->n_long : 0, rope ? rope->n_short : 0};
	if (!n[1] != !n[2])
		return ck_fail(err, CK_E_SOURCE, "%s: %s without %s: LongRoPE needs both", what,
			       names[n[1] ? 1 : 2], names[n[1] ? 2 : 1]);
	for (int k = 0; k < 3; k++)
		if (n[k] && n[k] != (size_t)(rot / 2))
			return ck_fail(err, CK_E_SOURCE,
				       "%s: %s has %zu numbers: the rope rotates %g pairs "
				       "(rope.dimension_count / 2)",
				       what, names[k], n[k], rot / 2);
	return 0;
}

/* Qwen3-MoE's and Qwen2-MoE's expert fields: every layer sparse; qwen3moe
 * renormalizes the top-k weights, qwen2moe does not (llama.cpp's), and
 * takes the dense width for its shared expert's when the file has none. */
static void qwen_moe_fields(const cJSON *meta, const char *g, double ne, double nu, double eff,
			    double ffn, cJSON *c)
{
	cJSON_AddNumberToObject(c, "num_experts", ne);
	cJSON_AddNumberToObject(c, "num_experts_per_tok", nu);
	cJSON_AddNumberToObject(c, "moe_intermediate_size", eff);
	int oks = 1;
	double sh = num(meta, g, "expert_shared_feed_forward_length", &oks);
	if (!strcmp(g, "qwen2moe"))
		cJSON_AddNumberToObject(c, "shared_expert_intermediate_size",
					oks && sh > 0 ? sh : ffn);
	cJSON_AddBoolToObject(c, "norm_topk_prob", !strcmp(g, "qwen3moe"));
	cJSON_AddNumberToObject(c, "decoder_sparse_step", 1);
	cJSON_AddItemToObject(c, "mlp_only_layers", cJSON_CreateArray());
}

/* GPT-OSS's fields beside the common ones: the experts (GptOssConfig reads
 * num_local_experts and experts_per_token; num_experts_per_tok too) and
 * their width, intermediate_size, from expert_feed_forward_length as
 * llama.cpp's gpt-oss reads it, the
 * window and its pattern, sliding on the even layers as llama.cpp's gpt-oss
 * runs it, the clamped SwiGLU's limit (llama.cpp's 7), the biases. A
 * block_count past 65535 gets no pattern: the tensor check refuses it. */
static void gpt_oss_fields(const cJSON *meta, double layers, double ne, double nu, double eff,
			   cJSON *c)
{
	int ok = 1;
	cJSON_ReplaceItemInObjectCaseSensitive(c, "intermediate_size", cJSON_CreateNumber(eff));
	double swa = num(meta, "gpt-oss", "attention.sliding_window", &ok);
	cJSON_AddNumberToObject(c, "num_local_experts", ne);
	cJSON_AddNumberToObject(c, "num_experts_per_tok", nu);
	cJSON_AddNumberToObject(c, "experts_per_token", nu);
	cJSON_AddNumberToObject(c, "sliding_window", ok ? swa : 128);
	cJSON *lt = layers <= 65535 ? cJSON_AddArrayToObject(c, "layer_types") : NULL;
	for (int i = 0; lt && i < (int)layers; i++)
		cJSON_AddItemToArray(
		    lt, cJSON_CreateString(i % 2 ? "full_attention" : "sliding_attention"));
	cJSON_AddNumberToObject(c, "swiglu_limit", 7);
	cJSON_AddBoolToObject(c, "attention_bias", 1);
}

/* SmolLM3: no rope on every fourth layer, llama.cpp's fixed step (a
 * block_count past 65535 gets no list: the tensor check refuses it). */
static void smollm3_fields(double layers, cJSON *c)
{
	cJSON_AddNumberToObject(c, "no_rope_layer_interval", 4);
	cJSON *nr = layers <= 65535 ? cJSON_AddArrayToObject(c, "no_rope_layers") : NULL;
	for (int i = 0; nr && i < (int)layers; i++)
		cJSON_AddItemToArray(nr, cJSON_CreateNumber((i + 1) % 4 != 0));
}

/* Cohere's fields: its LayerNorm's epsilon, the logit scale (CohereConfig's
 * 1/16 when the file has none), and the per-head Q/K norms llama.cpp's
 * command-r takes on 64 layers or more. */
static void cohere_fields(const cJSON *meta, double layers, double eps, cJSON *c)
{
	int ok = 1;
	double scale = num(meta, "command-r", "logit_scale", &ok);
	cJSON_AddNumberToObject(c, "layer_norm_eps", eps);
	cJSON_AddNumberToObject(c, "logit_scale", ok ? scale : 0.0625);
	cJSON_AddBoolToObject(c, "use_qk_norm", layers >= 64);
}

int ck_gguf_hf_config(const cJSON *meta, int64_t vocab, int tied, const struct ck_gguf_rope *rope,
		      const char *what, cJSON **out, struct ck_err *err)
{
	*out = NULL;
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(meta, "general.architecture");
	size_t ai = 0;
	while (cJSON_IsString(a) && ai < sizeof HF_ARCHS / sizeof *HF_ARCHS &&
	       strcmp(a->valuestring, HF_ARCHS[ai].gguf))
		ai++;
	if (!cJSON_IsString(a) || ai == sizeof HF_ARCHS / sizeof *HF_ARCHS)
		return 0; /* no Hugging Face counterpart: the tensors under GGUF names */
	const char *g = HF_ARCHS[ai].gguf;
	const int cohere = !strcmp(g, "command-r"); /* LayerNorm, not RMSNorm */
	const char *eps_key =
	    cohere ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon";
	int ok = 1;
	double hidden = num(meta, g, "embedding_length", &ok),
	       layers = num(meta, g, "block_count", &ok),
	       ffn = num(meta, g, "feed_forward_length", &ok),
	       heads = num(meta, g, "attention.head_count", &ok), eps = num(meta, g, eps_key, &ok),
	       ctx = num(meta, g, "context_length", &ok);
	int ok2 = 1, okh = 1, oke = 1;
	double kv = num(meta, g, "attention.head_count_kv", &ok2);
	double theta = num(meta, g, "rope.freq_base", &ok2);
	double hd = num(meta, g, "attention.key_length", &okh);
	double ne = num(meta, g, "expert_count", &oke), nu = num(meta, g, "expert_used_count", &oke);
	if (!ok) {
		return ck_fail(err, CK_E_SOURCE,
			       "%s: %s metadata is incomplete (embedding_length, "
			       "block_count, feed_forward_length, attention.head_count, "
			       "%s, context_length)",
			       what, g, eps_key);
	}
	int moe = oke && ne > 0 && !strcmp(g, "llama");
	int okf = 1;
	double eff = num(meta, g, "expert_feed_forward_length", &okf);
	int qmoe = !strcmp(g, "qwen3moe") || !strcmp(g, "qwen2moe"), oss = !strcmp(g, "gpt-oss");
	if ((qmoe || oss) && (!oke || !okf || ne < 1)) {
		return ck_fail(err, CK_E_SOURCE,
			       "%s: %s metadata is incomplete (expert_count, "
			       "expert_used_count, expert_feed_forward_length)",
			       what, g);
	}
	const char *cls = moe ? "MixtralForCausalLM" : HF_ARCHS[ai].hf;
	cJSON *c = cJSON_CreateObject(), *arch = cJSON_CreateStringArray(&cls, 1);
	if (!c || !arch || !cJSON_AddItemToObject(c, "architectures", arch)) {
		cJSON_Delete(c);
		cJSON_Delete(arch);
		return ck_fail_sys(err, ENOMEM, "%s", what);
	}
	cJSON_AddStringToObject(c, "model_type", moe ? "mixtral" : HF_ARCHS[ai].type);
	cJSON_AddNumberToObject(c, "hidden_size", hidden);
	cJSON_AddNumberToObject(c, "intermediate_size", ffn);
	cJSON_AddNumberToObject(c, "num_hidden_layers", layers);
	cJSON_AddNumberToObject(c, "num_attention_heads", heads);
	cJSON_AddNumberToObject(c, "num_key_value_heads", kv > 0 ? kv : heads);
	if (okh && hd > 0)
		cJSON_AddNumberToObject(c, "head_dim", hd);
	double head = okh && hd > 0 ? hd : hidden / heads;
	if (rotary(meta, g, head, rope, c, what, err) < 0) {
		cJSON_Delete(c);
		return -1;
	}
	if (!strcmp(g, "granite"))
		granite_fields(meta, head, c);
	if (!strncmp(g, "gemma", 5))
		gemma_fields(meta, g, hidden, heads, layers, head, c);
	if (moe) {
		cJSON_AddNumberToObject(c, "num_local_experts", ne);
		cJSON_AddNumberToObject(c, "num_experts_per_tok", nu);
	}
	if (qmoe)
		qwen_moe_fields(meta, g, ne, nu, eff, ffn, c);
	if (oss)
		gpt_oss_fields(meta, layers, ne, nu, eff, c);
	if (!strcmp(g, "smollm3"))
		smollm3_fields(layers, c);
	if (cohere)
		cohere_fields(meta, layers, eps, c);
	else
		cJSON_AddNumberToObject(c, "rms_norm_eps", eps);
	cJSON_AddNumberToObject(c, "rope_theta", theta > 0 ? theta : 10000.0);
	int okr = 1, oka = 1;
	double orig = num(meta, g, "rope.scaling.original_context_length", &okr);
	double att = num(meta, g, "rope.scaling.attn_factor", &oka);
	if (rope && rope->longf && rope->shortf) /* Phi-3's LongRoPE */
		longrope(rope->longf, rope->n_long, rope->shortf, rope->n_short, oka ? att : -1,
			 okr && orig > 0 ? ctx / orig : 1.0, c);
	else if (rope && rope->freqs)
		longrope(rope->freqs, rope->n_freqs, rope->freqs, rope->n_freqs, 1.0, 1.0, c);
	else
		rope_scaling(meta, g, c);
	if (!strcmp(g, "phi3")) {
		int oks = 1;
		double swa = num(meta, g, "attention.sliding_window", &oks);
		if (oks && swa > 0)
			cJSON_AddNumberToObject(c, "sliding_window", swa);
		else
			cJSON_AddNullToObject(c, "sliding_window");
		if (okr)
			cJSON_AddNumberToObject(c, "original_max_position_embeddings", orig);
	}
	cJSON_AddNumberToObject(c, "max_position_embeddings", ctx);
	if (vocab >= 0)
		cJSON_AddNumberToObject(c, "vocab_size", (double)vocab);
	cJSON_AddBoolToObject(c, "tie_word_embeddings", tied);
	cJSON_AddStringToObject(c, "torch_dtype", "float32");
	*out = c;
	return 0;
}
