#include "npy.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

const char *ck_npy_descr(enum ck_dtype dt)
{
	switch (dt) {
	case CK_DT_BOOL: return "|b1";
	case CK_DT_U8: return "|u1";
	case CK_DT_I8: return "|i1";
	case CK_DT_I16: return "<i2";
	case CK_DT_U16: return "<u2";
	case CK_DT_F16: return "<f2";
	case CK_DT_BF16: return "<V2";
	case CK_DT_I32: return "<i4";
	case CK_DT_U32: return "<u4";
	case CK_DT_F32: return "<f4";
	case CK_DT_C64: return "<c8";
	case CK_DT_F64: return "<f8";
	case CK_DT_I64: return "<i8";
	case CK_DT_U64: return "<u8";
	default: return "|V1"; /* FP8 variants: raw bytes */
	}
}

size_t ck_npy_header(enum ck_dtype dt, int ndim, const int64_t *shape, char *buf, size_t cap)
{
	char dict[768];
	size_t k = (size_t)snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
				    ck_npy_descr(dt));
	for (int d = 0; d < ndim && k < sizeof dict; d++)
		k += (size_t)snprintf(dict + k, sizeof dict - k, "%s%" PRId64, d ? ", " : "", shape[d]);
	if (k < sizeof dict)
		k += (size_t)snprintf(dict + k, sizeof dict - k, "%s), }", ndim == 1 ? "," : "");
	if (k >= sizeof dict)
		return 0;
	/* magic(6) + version(2) + length(2) + dict + padding + '\n' = multiple of 64 */
	size_t total = (10 + k + 1 + 63) / 64 * 64;
	if (total > cap || total - 10 > 65535)
		return 0;
	memcpy(buf, "\x93NUMPY\x01\x00", 8);
	uint16_t hl = (uint16_t)(total - 10);
	buf[8] = (char)(hl & 0xFF);
	buf[9] = (char)(hl >> 8);
	memcpy(buf + 10, dict, k);
	memset(buf + 10 + k, ' ', total - 10 - k - 1);
	buf[total - 1] = '\n';
	return total;
}
