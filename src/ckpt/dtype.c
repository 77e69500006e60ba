#include "dtype.h"

#include <strings.h>
#include <string.h>

static const struct {
	const char *name;
	unsigned size;
} dtypes[CK_DT_COUNT] = {
	[CK_DT_INVALID] = {"?", 0},
	[CK_DT_BOOL] = {"BOOL", 1},
	[CK_DT_U8] = {"U8", 1},
	[CK_DT_I8] = {"I8", 1},
	[CK_DT_F8_E5M2] = {"F8_E5M2", 1},
	[CK_DT_F8_E4M3] = {"F8_E4M3", 1},
	[CK_DT_F8_E8M0] = {"F8_E8M0", 1},
	[CK_DT_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 1},
	[CK_DT_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 1},
	[CK_DT_I16] = {"I16", 2},
	[CK_DT_U16] = {"U16", 2},
	[CK_DT_F16] = {"F16", 2},
	[CK_DT_BF16] = {"BF16", 2},
	[CK_DT_I32] = {"I32", 4},
	[CK_DT_U32] = {"U32", 4},
	[CK_DT_F32] = {"F32", 4},
	[CK_DT_C64] = {"C64", 8},
	[CK_DT_F64] = {"F64", 8},
	[CK_DT_I64] = {"I64", 8},
	[CK_DT_U64] = {"U64", 8},
	[CK_DT_F4_E2M1] = {"F4_E2M1", 0},
};

/* Known to safetensors but packed below one byte per element: a byte range
 * cannot hold a whole element, so slicing and casting are undefined for us. */
static const char *const subbyte_names[] = {"F4", "F6_E2M3", "F6_E3M2"};

const char *ck_dtype_name(enum ck_dtype dt)
{
	return (dt > CK_DT_INVALID && dt < CK_DT_COUNT) ? dtypes[dt].name : "?";
}

size_t ck_dtype_size(enum ck_dtype dt)
{
	return (dt > CK_DT_INVALID && dt < CK_DT_COUNT) ? dtypes[dt].size : 0;
}

enum ck_dtype ck_dtype_parse(const char *s, int *subbyte)
{
	/* once per tensor of 100k: the weights' usual types first, then the
	 * table, first byte first (a walk to BF16 was 2% of planning) */
	static const enum ck_dtype usual[] = {CK_DT_BF16, CK_DT_F32, CK_DT_F16};
	if (subbyte)
		*subbyte = 0;
	for (size_t k = 0; k < sizeof usual / sizeof *usual; k++)
		if (strcmp(s, dtypes[usual[k]].name) == 0)
			return usual[k];
	for (int i = 1; i < CK_DT_COUNT; i++) /* never an internal one (size 0) */
		if (dtypes[i].size && s[0] == dtypes[i].name[0] && strcmp(s, dtypes[i].name) == 0)
			return (enum ck_dtype)i;
	for (size_t i = 0; i < sizeof subbyte_names / sizeof *subbyte_names; i++)
		if (subbyte && strcmp(s, subbyte_names[i]) == 0)
			*subbyte = 1;
	return CK_DT_INVALID;
}

int ck_dtype_is_castable_float(enum ck_dtype dt)
{
	return dt == CK_DT_F32 || dt == CK_DT_F16 || dt == CK_DT_BF16 || dt == CK_DT_F8_E4M3 ||
	       dt == CK_DT_F8_E5M2;
}

/* torch's dtype names; the first of a dtype is its canonical name. */
static const struct {
	const char *n;
	enum ck_dtype d;
} TORCH[] = {{"float32", CK_DT_F32},
	     {"float", CK_DT_F32},
	     {"float64", CK_DT_F64},
	     {"double", CK_DT_F64},
	     {"float16", CK_DT_F16},
	     {"half", CK_DT_F16},
	     {"bfloat16", CK_DT_BF16},
	     {"int64", CK_DT_I64},
	     {"long", CK_DT_I64},
	     {"int32", CK_DT_I32},
	     {"int", CK_DT_I32},
	     {"int16", CK_DT_I16},
	     {"short", CK_DT_I16},
	     {"int8", CK_DT_I8},
	     {"uint8", CK_DT_U8},
	     {"uint16", CK_DT_U16},
	     {"uint32", CK_DT_U32},
	     {"uint64", CK_DT_U64},
	     {"bool", CK_DT_BOOL},
	     {"complex64", CK_DT_C64},
	     {"cfloat", CK_DT_C64},
	     {"float8_e4m3fn", CK_DT_F8_E4M3},
	     {"float8_e5m2", CK_DT_F8_E5M2},
	     {"float8_e4m3fnuz", CK_DT_F8_E4M3FNUZ},
	     {"float8_e5m2fnuz", CK_DT_F8_E5M2FNUZ},
	     {"float8_e8m0fnu", CK_DT_F8_E8M0}};

const char *ck_dtype_torch_name(enum ck_dtype dt)
{
	for (size_t i = 0; i < sizeof TORCH / sizeof *TORCH; i++)
		if (TORCH[i].d == dt)
			return TORCH[i].n;
	return NULL;
}

enum ck_dtype ck_dtype_from_torch(const char *s)
{
	if (!strncmp(s, "torch.", 6))
		s += 6;
	for (size_t i = 0; i < sizeof TORCH / sizeof *TORCH; i++)
		if (!strcmp(s, TORCH[i].n))
			return TORCH[i].d;
	return CK_DT_INVALID;
}

enum ck_dtype ck_dtype_parse_user(const char *s)
{
	for (int i = 1; i < CK_DT_COUNT; i++)
		if (dtypes[i].size && strcasecmp(s, dtypes[i].name) == 0)
			return (enum ck_dtype)i;
	return ck_dtype_from_torch(s);
}
