/* llama-quantize's per-tensor choices beside its mix, for the GGUF view:
 * --pure, --output-tensor-type, --token-embedding-type,
 * --leave-output-tensor and --tensor-type PATTERN=TYPE (also from
 * --tensor-type-file), as ckptfs's --gguf-pure, --gguf-output-type,
 * --gguf-embd-type, --gguf-leave-output, --gguf-tensor-type and
 * --gguf-tensor-type-file (mounts: -o gguf_pure, ...). They decide a
 * matrix's type in llama.cpp's order (llama_tensor_get_type): an output
 * left as it is; the embedding's and the output's types; the first
 * pattern that matches the name anywhere (ECMAScript, lowercased first as
 * llama-quantize lowercases it); else --pure's base type or the mix's
 * rules; then rows that a type's blocks do not tile fall back (a pattern's
 * type too; the two named types are refused there, as llama.cpp has no
 * fallback for them). */
#ifndef CK_GGUF_OVERRIDES_H
#define CK_GGUF_OVERRIDES_H

#include <stdint.h>

#include "../plan/plan.h"
#include "../util/ecma_re.h"
#include "gguf_view.h"

struct ck_gguf_tt_rule {
	struct ck_re re;
	uint32_t type;
};

struct ck_gguf_overrides {
	int pure, leave_output;
	int64_t output, embd; /* a ggml type, or -1 */
	struct ck_gguf_tt_rule *tt;
	size_t n_tt;
};

/* o's overrides for a view of the file type named ftype (quantized: Q8_0
 * or a mix; the overrides go with those only). Refused in one line naming
 * the option or the file and the entry: a float file type, a type ckptfs
 * does not write, an entry that is not PATTERN=TYPE, a pattern that does
 * not compile or says \B, \D, \S or \W (lowercased, llama-quantize would
 * read \b, \d, \s, \w), a file that is not a regular file of at most
 * 1 MiB. */
int ck_gguf_overrides_parse(const struct ck_gguf_opts *o, const char *ftype, int quantized,
			    struct ck_gguf_overrides *v, struct ck_err *err);
void ck_gguf_overrides_free(struct ck_gguf_overrides *v);

/* The type of the first pattern that matches name, or -1; -2 with err if
 * memory ran out. */
int64_t ck_gguf_tt_type(const struct ck_gguf_overrides *v, const char *name, struct ck_err *err);

/* A type a name gives t (--gguf-output-type, --gguf-embd-type): refused
 * when its blocks do not tile t's rows (llama.cpp has no fallback for a
 * type asked for by name). */
int ck_gguf_named_type(const struct ck_target *t, uint32_t type, struct ck_err *err);

#endif
