/* A GGUF file (version 3, little endian) laid out over a plan's targets:
 * the header, the metadata, the tensor infos (dims fastest-varying first,
 * offsets aligned) and the data section as target spans, so that a read of
 * any byte range evaluates only the tensors it touches (the GGUF view). */
#ifndef CK_GGUF_OUT_H
#define CK_GGUF_OUT_H

#include <stddef.h>
#include <stdint.h>

#include "../util/bytebuf.h"
#include "plan.h"
#include "vfile.h"

/* ggml's types as GGUF numbers them, those the view writes */
enum { CK_GGUF_F32 = 0, CK_GGUF_F16 = 1, CK_GGUF_BF16 = 30 };
#define CK_GGUF_ALIGN 32
#define CK_GGUF_MAX_NAME 63 /* llama.cpp's GGML_MAX_NAME less the NUL */

/* Metadata key/value pairs, encoded as they are added. A failed allocation
 * is remembered (b.oom) and reported by ck_gguf_build. */
struct ck_gguf_meta {
	struct ck_buf b;
	uint64_t n; /* pairs */
};

void ck_gguf_meta_str(struct ck_gguf_meta *m, const char *key, const char *val);
void ck_gguf_meta_u32(struct ck_gguf_meta *m, const char *key, uint32_t val);
void ck_gguf_meta_u16(struct ck_gguf_meta *m, const char *key, uint16_t val);
void ck_gguf_meta_i32(struct ck_gguf_meta *m, const char *key, int32_t val);
void ck_gguf_meta_f32(struct ck_gguf_meta *m, const char *key, float val);
void ck_gguf_meta_bool(struct ck_gguf_meta *m, const char *key, int val);
void ck_gguf_meta_strs(struct ck_gguf_meta *m, const char *key, char *const *v, size_t n);
void ck_gguf_meta_f32s(struct ck_gguf_meta *m, const char *key, const float *v, size_t n);
void ck_gguf_meta_i32s(struct ck_gguf_meta *m, const char *key, const int32_t *v, size_t n);
/* A whole record (key, type, value) as a GGUF file encodes it. */
void ck_gguf_meta_record(struct ck_gguf_meta *m, const void *rec, size_t len);
/* from's pairs after m's. */
void ck_gguf_meta_append(struct ck_gguf_meta *m, const struct ck_gguf_meta *from);
void ck_gguf_meta_free(struct ck_gguf_meta *m);

/* The GGUF type target t is written as: its quantized type, or F32, F16,
 * BF16; -1 when its dtype has none. */
int64_t ck_gguf_type_of(const struct ck_target *t);

/* A tensor the view computes from config.json rather than maps from the
 * source (Llama 3's rope_freqs.weight): F32, one dim, its bytes literal. */
struct ck_gguf_extra {
	const char *name;
	float *data;
	int64_t n;
	uint64_t offset; /* in the whole file: set by ck_gguf_build */
};

/* Lay out the file: out gets literal bytes and spans of p's targets (p's
 * indices), then the n_x extra tensors. Fails (CK_E_MAPPING) on a name
 * over 63 bytes, more than 4 dims or a dtype GGUF cannot hold. */
int ck_gguf_build(const struct ck_plan *p, const struct ck_gguf_meta *m, struct ck_gguf_extra *x,
		  size_t n_x, struct ck_vfile *out, struct ck_err *err);

/* The same file as gguf-split cuts it (llama.cpp loads the first and finds
 * the rest: model-00001-of-00003.gguf ...): a new file when the next
 * tensor would take a file's tensor bytes past max_bytes (a tensor larger
 * than that alone in its file, where gguf-split gives up), or every
 * max_tensors tensors (one of the two; 0: not that rule). The first file
 * holds m, every file split.no (u16), split.count (u16) and
 * split.tensors.count (i32) after it; out gets *n_out files (free with
 * ck_gguf_free_split). */
int ck_gguf_build_split(const struct ck_plan *p, const struct ck_gguf_meta *m,
			struct ck_gguf_extra *x, size_t n_x, uint64_t max_bytes,
			uint64_t max_tensors, struct ck_vfile **out, size_t *n_out,
			struct ck_err *err);
void ck_gguf_free_split(struct ck_vfile *v, size_t n);

#endif
