#include "gguf_overrides.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../ckpt/ggml_types.h"
#include "../util/json_strict.h"

#define MAX_TT_FILE_BYTES ((size_t)1 << 20)
#define MAX_TT_RULES 4096

/* The types ckptfs writes that llama-quantize's options may name. */
static const struct {
	const char *name;
	uint32_t ggml;
} TENSOR_TYPES[] = {
    {"F32", CK_GGUF_F32},     {"F16", CK_GGUF_F16},	  {"BF16", CK_GGUF_BF16},
    {"Q8_0", CK_GGML_Q8_0},   {"Q4_0", CK_GGML_Q4_0},	  {"Q4_1", CK_GGML_Q4_1},
    {"Q5_0", CK_GGML_Q5_0},   {"Q5_1", CK_GGML_Q5_1},	  {"Q2_K", CK_GGML_Q2_K},
    {"Q3_K", CK_GGML_Q3_K},   {"Q4_K", CK_GGML_Q4_K},	  {"Q5_K", CK_GGML_Q5_K},
    {"Q6_K", CK_GGML_Q6_K},   {"IQ4_NL", CK_GGML_IQ4_NL}, {"IQ4_XS", CK_GGML_IQ4_XS},
    {"MXFP4", CK_GGML_MXFP4},
};
#define TYPES_SAID                                                                                 \
	"one of F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, "      \
	"IQ4_NL, IQ4_XS, MXFP4"

static int64_t type_named(const char *name)
{
	for (size_t j = 0; j < sizeof TENSOR_TYPES / sizeof *TENSOR_TYPES; j++)
		if (!strcasecmp(name, TENSOR_TYPES[j].name))
			return TENSOR_TYPES[j].ggml;
	return -1;
}

/* One PATTERN=TYPE (where: the option or the file, for messages). */
static int add_rule(struct ck_gguf_overrides *v, const char *where, const char *arg, size_t len,
		    struct ck_err *err)
{
	const char *eq = memchr(arg, '=', len);
	if (!eq || eq == arg || eq + 1 == arg + len)
		return ck_fail(err, CK_E_USAGE, "%s \"%.*s\": not PATTERN=TYPE", where, (int)len,
			       arg);
	if (v->n_tt == MAX_TT_RULES)
		return ck_fail(err, CK_E_USAGE, "%s: more than %d tensor type patterns", where,
			       MAX_TT_RULES);
	char type[16], *pat = strndup(arg, (size_t)(eq - arg));
	size_t tlen = (size_t)(arg + len - eq - 1);
	if (!pat)
		return ck_fail_sys(err, ENOMEM, "%s", where);
	snprintf(type, sizeof type, "%.*s", (int)(tlen < sizeof type ? tlen : 0), eq + 1);
	int64_t t = type_named(type);
	char upper = 0; /* the first escape of \B, \D, \S or \W */
	for (const char *c = pat; *c && !upper; c++)
		if (*c == '\\' && c[1])
			upper = strchr("BDSW", *++c) ? *c : 0;
	for (char *c = pat; *c; c++) /* llama-quantize's tolower */
		*c = (char)tolower((unsigned char)*c);
	int rc = -1;
	struct ck_gguf_tt_rule *r = &v->tt[v->n_tt];
	if (t < 0)
		ck_fail(err, CK_E_USAGE, "%s \"%.*s\": the type \"%.*s\": " TYPES_SAID, where,
			(int)len, arg, (int)tlen, eq + 1);
	else if (upper)
		ck_fail(err, CK_E_USAGE,
			"%s \"%.*s\": llama-quantize lowercases a pattern, so \\%c would mean "
			"\\%c: say it another way ([^0-9] for \\D)",
			where, (int)len, arg, upper, tolower((unsigned char)upper));
	else if (ck_re_compile(pat, &r->re, err) < 0)
		ck_err_prefix(err, "%s \"%.*s\": the pattern", where, (int)len, arg);
	else {
		r->type = (uint32_t)t;
		v->n_tt++;
		rc = 0;
	}
	free(pat);
	return rc;
}

/* llama-quantize's --tensor-type-file: entries split by white space. */
static int add_file(struct ck_gguf_overrides *v, const char *path, struct ck_err *err)
{
	char *buf;
	size_t len;
	if (ck_read_file(path, MAX_TT_FILE_BYTES, &buf, &len, CK_E_USAGE, err) < 0)
		return -1;
	int rc = 0;
	for (size_t i = 0; i < len && rc == 0;) {
		while (i < len && isspace((unsigned char)buf[i]))
			i++;
		size_t s = i;
		while (i < len && !isspace((unsigned char)buf[i]))
			i++;
		if (memchr(buf + s, '\0', i - s))
			rc = ck_fail(err, CK_E_USAGE, "%s: a NUL byte in an entry", path);
		else if (i > s)
			rc = add_rule(v, path, buf + s, i - s, err);
	}
	free(buf);
	return rc;
}

int ck_gguf_overrides_parse(const struct ck_gguf_opts *o, const char *ftype, int quantized,
			    struct ck_gguf_overrides *v, struct ck_err *err)
{
	*v = (struct ck_gguf_overrides){o->pure, o->leave_output, -1, -1, NULL, 0};
	if (!o->pure && !o->leave_output && !o->output_type && !o->embd_type && !o->n_tt)
		return 0;
	if (!quantized)
		return ck_fail(
		    err, CK_E_USAGE,
		    "llama-quantize's --pure, --output-tensor-type, "
		    "--token-embedding-type, --leave-output-tensor and --tensor-type "
		    "(--gguf-pure ... --gguf-tensor-type) go with a quantized type, Q8_0 "
		    "or a mix, not %s",
		    ftype);
	const char *names[2] = {o->output_type, o->embd_type};
	int64_t *to[2] = {&v->output, &v->embd};
	for (int k = 0; k < 2; k++)
		if (names[k] && (*to[k] = type_named(names[k])) < 0)
			return ck_fail(err, CK_E_USAGE, "the %s type \"%s\": " TYPES_SAID,
				       k ? "token embedding" : "output tensor", names[k]);
	if (o->n_tt && !(v->tt = calloc(MAX_TT_RULES, sizeof *v->tt)))
		return ck_fail_sys(err, ENOMEM, "tensor types");
	for (int k = 0; k < o->n_tt; k++) {
		const char *a = o->tt[k].arg;
		if ((o->tt[k].file ? add_file(v, a, err)
				   : add_rule(v, "--gguf-tensor-type", a, strlen(a), err)) < 0) {
			ck_gguf_overrides_free(v);
			return -1;
		}
	}
	return 0;
}

void ck_gguf_overrides_free(struct ck_gguf_overrides *v)
{
	for (size_t k = 0; k < v->n_tt; k++)
		ck_re_free(&v->tt[k].re);
	free(v->tt);
	v->tt = NULL;
	v->n_tt = 0;
}

int64_t ck_gguf_tt_type(const struct ck_gguf_overrides *v, const char *name, struct ck_err *err)
{
	for (size_t k = 0; k < v->n_tt; k++) {
		int r = ck_re_search(&v->tt[k].re, name, strlen(name));
		if (r < 0)
			return ck_fail_sys(err, -r, "\"%s\": its tensor type patterns", name) - 1;
		if (r)
			return v->tt[k].type;
	}
	return -1;
}

int ck_gguf_named_type(const struct ck_target *t, uint32_t type, struct ck_err *err)
{
	size_t qk = 1, qb;
	const int64_t last = t->v.shape[t->v.ndim - 1];
	if (ck_ggml_block(type, &qk, &qb) && last % (int64_t)qk)
		return ck_fail(err, CK_E_USAGE,
			       "\"%s\": its rows of %lld are not whole %s blocks of %zu: it cannot "
			       "be written in that type",
			       t->name, (long long)last, ck_ggml_type_name(type), qk);
	return 0;
}
