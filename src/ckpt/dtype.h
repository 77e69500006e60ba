/* Tensor element types: the safetensors dtype set, with byte sizes. */
#ifndef CK_DTYPE_H
#define CK_DTYPE_H

#include <stddef.h>

enum ck_dtype {
	CK_DT_INVALID = 0,
	CK_DT_BOOL,
	CK_DT_U8,
	CK_DT_I8,
	CK_DT_F8_E5M2,
	CK_DT_F8_E4M3,
	CK_DT_F8_E8M0,
	CK_DT_F8_E4M3FNUZ,
	CK_DT_F8_E5M2FNUZ,
	CK_DT_I16,
	CK_DT_U16,
	CK_DT_F16,
	CK_DT_BF16,
	CK_DT_I32,
	CK_DT_U32,
	CK_DT_F32,
	CK_DT_C64,
	CK_DT_F64,
	CK_DT_I64,
	CK_DT_U64,
	/* Internal: two E2M1 values per byte (MXFP4 blocks, low nibble first).
	 * No file declares it: mxfp4() reads U8 blocks as it, and ck_dtype_size
	 * is 0 (an element is half a byte). */
	CK_DT_F4_E2M1,
	CK_DT_COUNT
};

/* Safetensors spelling ("BF16"), or "?" for an invalid value. */
const char *ck_dtype_name(enum ck_dtype dt);
/* Bytes per element; 0 for CK_DT_INVALID and the sub-byte CK_DT_F4_E2M1. */
size_t ck_dtype_size(enum ck_dtype dt);
/* Parse a safetensors dtype string. Returns CK_DT_INVALID for unknown names.
 * *subbyte is set when the name is a known sub-byte type (F4, F6_*) that
 * ckptfs refuses, so the caller can say so precisely. */
enum ck_dtype ck_dtype_parse(const char *s, int *subbyte);
/* torch's dtype names ("bfloat16", "float", "float8_e4m3fn"; "torch." may
 * precede): the one table for DCP metadata, --expect and the CLI. */
enum ck_dtype ck_dtype_from_torch(const char *name);
/* torch's canonical name ("float32", "bfloat16", ...), or NULL. */
const char *ck_dtype_torch_name(enum ck_dtype dt);
/* A dtype a person typed: safetensors names in any case ("bf16") or
 * torch's names ("bfloat16", "torch.float16"). */
enum ck_dtype ck_dtype_parse_user(const char *s);
/* True for the floating-point types the cast op converts between. */
int ck_dtype_is_castable_float(enum ck_dtype dt);

#endif
