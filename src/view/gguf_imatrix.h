/* The GGUF view's importance matrix (-o gguf_imatrix=FILE, convert and
 * inspect --gguf-imatrix FILE): llama-quantize --imatrix. Each quantized
 * tensor the file names gets its values as the quantizer's column weights
 * (kern/ggml_imx.c); the rest are quantized without, as llama-quantize
 * does them. */
#ifndef CK_GGUF_IMATRIX_H
#define CK_GGUF_IMATRIX_H

#include "../ckpt/imatrix.h"
#include "../plan/gguf_out.h"
#include "../plan/plan.h"

/* Load path into m and point the weighted targets of p (the K-quants,
 * Q4_0, Q5_0, Q5_1) at their entries; *used, how many. Refused, as
 * llama-quantize refuses them: an entry whose size is not the tensor's
 * columns (times its experts), token_embd.weight's aside (llama-quantize
 * ignores that one); and, beyond it, a file that names none of the
 * view's matrices (another model's) or a view of a float type (type: the
 * view's, F32 ... Q6_K; Q8_0 is taken, for its --gguf-tensor-type
 * tensors). */
int ck_gguf_imatrix_attach(struct ck_plan *p, const char *path, const char *type,
			   struct ck_imatrix *m, size_t *used, struct ck_err *err);
/* quantize.imatrix.file, .dataset, .entries_count and .chunks_count, as
 * llama-quantize records them. */
void ck_gguf_imatrix_meta(const struct ck_imatrix *m, const char *path, struct ck_gguf_meta *meta);

#endif
