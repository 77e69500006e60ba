#include "malformed.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

unsigned char *st_image(const char *json, size_t data_len, size_t *len)
{
	size_t n = strlen(json);
	unsigned char *p = calloc(1, 8 + n + data_len + 1);
	if (!p)
		abort();
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(((uint64_t)n >> (8 * i)) & 0xFF);
	memcpy(p + 8, json, n);
	*len = 8 + n + data_len;
	return p;
}

/* Most classes are one header text with a data section of the given size. */
#define HDR(fn, json, data)                                                                        \
	static unsigned char *fn(size_t *len)                                                      \
	{                                                                                          \
		return st_image(json, data, len);                                                  \
	}

static unsigned char *too_small(size_t *len)
{
	unsigned char *p = calloc(1, 5);
	*len = 5;
	return p;
}

static unsigned char *header_too_large(size_t *len)
{
	unsigned char *p = st_image("{}", 0, len);
	uint64_t n = 100000001;
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)((n >> (8 * i)) & 0xFF);
	return p;
}

static unsigned char *header_past_eof(size_t *len)
{
	unsigned char *p = st_image("{}", 0, len);
	p[0] = 200; /* N = 200, file is 10 bytes */
	return p;
}

static unsigned char *not_utf8(size_t *len)
{
	unsigned char *p = st_image("{\"a\xff\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]}}",
				    1, len);
	return p;
}

static unsigned char *embedded_nul(size_t *len)
{
	/* "{}" then NUL then garbage: cJSON alone would stop at the NUL */
	unsigned char *p = st_image("{}  garbage", 0, len);
	p[8 + 2] = 0;
	return p;
}

#define T1 "\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"

HDR(not_json, "{\"t\": [1, 2", 0)
HDR(not_object, "[1, 2, 3]", 0)
HDR(trailing_garbage, "{" T1 "} x", 8)
HDR(nul_escape_key, "{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1)
HDR(unknown_dtype, "{\"t\":{\"dtype\":\"F3\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8)
HDR(subbyte_dtype, "{\"t\":{\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[0,1]}}", 1)
HDR(dtype_wrong_case, "{\"t\":{\"Dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8)
HDR(dtype_lowercase_value, "{\"t\":{\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8)
HDR(dtype_not_string, "{\"t\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,8]}}", 8)
HDR(shape_negative, "{\"t\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8)
HDR(shape_fraction, "{\"t\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8)
HDR(shape_exponent, "{\"t\":{\"dtype\":\"U8\",\"shape\":[1e3],\"data_offsets\":[0,1000]}}", 1000)
HDR(shape_above_2p53,
    "{\"t\":{\"dtype\":\"U8\",\"shape\":[9007199254740993,0],\"data_offsets\":[0,0]}}", 0)
HDR(shape_product_overflow,
    "{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}", 0)
HDR(shape_not_list, "{\"t\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8)
HDR(shape_string_dim, "{\"t\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8)
HDR(too_many_dims,
    "{\"t\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],"
    "\"data_offsets\":[0,1]}}",
    1)
HDR(offsets_wrong_span, "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]}}", 12)
HDR(offsets_reversed, "{\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8)
HDR(offsets_not_pair, "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8)
HDR(offsets_negative, "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", 8)
HDR(offsets_gap,
    "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
    "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
    20)
HDR(offsets_overlap,
    "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
    "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
    12)
HDR(offsets_not_from_zero, "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
    12)
HDR(trailing_bytes, "{" T1 "}", 9)
HDR(data_truncated, "{" T1 "}", 7)
HDR(duplicate_key, "{" T1 "," T1 "}", 8)
HDR(duplicate_field,
    "{\"t\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8)
HDR(metadata_not_object, "{\"__metadata__\":[\"a\"]," T1 "}", 8)
HDR(metadata_not_string, "{\"__metadata__\":{\"format\":1}," T1 "}", 8)
HDR(entry_not_object, "{\"t\":[1,2]}", 0)
HDR(missing_offsets, "{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8)

const struct malformed_class malformed_classes[] = {
	{"too_small", "too small for the 8-byte header length", too_small},
	{"header_too_large", "exceeds the limit of 100000000", header_too_large},
	{"header_past_eof", "runs past the end", header_past_eof},
	{"not_utf8", "invalid UTF-8", not_utf8},
	{"embedded_nul", "NUL byte", embedded_nul},
	{"not_json", "invalid JSON", not_json},
	{"not_object", "not a JSON object", not_object},
	{"trailing_garbage", "trailing data after the JSON value", trailing_garbage},
	{"nul_escape_key", "\\u0000", nul_escape_key},
	{"unknown_dtype", "unknown dtype \"F3\"", unknown_dtype},
	{"subbyte_dtype", "sub-byte dtype F4", subbyte_dtype},
	{"dtype_wrong_case", "missing field \"dtype\"", dtype_wrong_case},
	{"dtype_lowercase_value", "unknown dtype \"f32\"", dtype_lowercase_value},
	{"dtype_not_string", "dtype is not a string", dtype_not_string},
	{"shape_negative", "shape[0] is not a non-negative integer", shape_negative},
	{"shape_fraction", "not an integer literal", shape_fraction},
	{"shape_exponent", "not an integer literal", shape_exponent},
	{"shape_above_2p53", "exceeds 2^53", shape_above_2p53},
	{"shape_product_overflow", "shape product overflows", shape_product_overflow},
	{"shape_not_list", "shape is not a list", shape_not_list},
	{"shape_string_dim", "shape[0] is not a non-negative integer", shape_string_dim},
	{"too_many_dims", "9 dimensions", too_many_dims},
	{"offsets_wrong_span", "span 12 bytes but F32", offsets_wrong_span},
	{"offsets_reversed", "before begin", offsets_reversed},
	{"offsets_not_pair", "not a list of two integers", offsets_not_pair},
	{"offsets_negative", "not non-negative integers", offsets_negative},
	{"offsets_gap", "(gap)", offsets_gap},
	{"offsets_overlap", "(overlap)", offsets_overlap},
	{"offsets_not_from_zero", "begin at 4 but the previous tensor ends at 0", offsets_not_from_zero},
	{"trailing_bytes", "(trailing bytes)", trailing_bytes},
	{"data_truncated", "(file truncated)", data_truncated},
	{"duplicate_key", "duplicate key \"t\"", duplicate_key},
	{"duplicate_field", "duplicate field \"dtype\"", duplicate_field},
	{"metadata_not_object", "__metadata__ must be an object", metadata_not_object},
	{"metadata_not_string", "__metadata__ value for \"format\" is not a string",
	 metadata_not_string},
	{"entry_not_object", "entry is not an object", entry_not_object},
	{"missing_offsets", "missing field \"data_offsets\"", missing_offsets},
};
const size_t n_malformed_classes = sizeof malformed_classes / sizeof *malformed_classes;
