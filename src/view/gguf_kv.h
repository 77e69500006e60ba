/* llama-quantize's --override-kv KEY=TYPE:VALUE as ckptfs's
 * --gguf-override-kv (mounts: -o gguf_override_kv=): a metadata pair of
 * the served file set after the view has made the rest. TYPE is int (a
 * u32, as llama-quantize writes it), float (f32), bool (true, false) or str
 * (127 bytes at most, llama-quantize's limit); the key 127 bytes at most.
 * Where llama-quantize would write something other than what was asked
 * (atol's and atof's leftovers, a negative int as its absolute value) or a
 * file llama.cpp cannot load (a key's type changed, an array replaced by a
 * scalar, the alignment or the split keys, the architecture every other
 * key is named after, hyper-parameters that no longer describe the
 * tensors), ckptfs refuses instead. */
#ifndef CK_GGUF_KV_H
#define CK_GGUF_KV_H

#include <stddef.h>
#include <stdint.h>

#include "../plan/gguf_out.h"
#include "../util/error.h"

#define CK_GGUF_MAX_KV 64

struct ck_gguf_kv_set {
	char key[128];
	char tag; /* 'i' (u32), 'f' (f32), 'b' (bool), 's' (string) */
	uint32_t u;
	float f;
	int b;
	char s[128];
};

/* One KEY=TYPE:VALUE; -1 with err (CK_E_USAGE) naming it. */
int ck_gguf_kv_parse(const char *arg, struct ck_gguf_kv_set *kv, struct ck_err *err);

/* Set the n pairs in m in order: a key m holds keeps its place and must
 * keep its type; a new key goes after the others. A key given twice is
 * refused. */
int ck_gguf_kv_apply(struct ck_gguf_meta *m, const struct ck_gguf_kv_set *kv, size_t n,
		     struct ck_err *err);

/* A scalar number m holds under key (u8 ... f64, bool): 1 and *out, 0 when
 * absent or not a number. */
int ck_gguf_meta_number(const struct ck_gguf_meta *m, const char *key, double *out);

#endif
