/* gpubench: throughput of the CUDA box kernels on device-resident data, as a
 * ratio of a device-to-device copy moving the same bytes (read + written),
 * timed side by side in one run. Shapes are those of real conversions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/kern/gpu.h"

struct shape {
	const char *what;
	struct ck_box b;
};

static struct ck_box box2(int64_t rows, int64_t cols, int transpose, enum ck_dtype sdt,
			  enum ck_dtype cast)
{
	struct ck_box b;
	memset(&b, 0, sizeof b);
	b.ndim = 2;
	b.ext[0] = rows, b.ext[1] = cols;
	b.dstride[0] = cols, b.dstride[1] = 1;
	if (transpose) /* the source is [cols, rows]: row r of the output is column r */
		b.sstride[0] = 1, b.sstride[1] = rows;
	else
		b.sstride[0] = cols, b.sstride[1] = 1;
	b.sblock[0] = b.sblock[1] = 1;
	b.sdt = sdt;
	b.ddt = cast ? cast : sdt;
	if (cast) {
		b.nc = 1;
		b.casts[0] = cast;
	}
	return b;
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 20;
	char why[200];
	if (ck_gpu_count(why, sizeof why) == 0) {
		printf("gpubench: %s\n", why);
		return 77;
	}
	struct ck_gpu *g;
	struct ck_err err;
	if (ck_gpu_open(0, 64u << 20, 1, &g, &err) < 0) {
		printf("gpubench: %s\n", err.msg);
		return 1;
	}
	struct shape s[8];
	int n = 0;
	const int64_t R = 8192, C = 8192;
	s[n++] = (struct shape){"copy BF16 8192x8192 (rows kernel)", box2(R, C, 0, CK_DT_BF16, 0)};
	s[n++] = (struct shape){"cast BF16->F32 8192x8192", box2(R, C, 0, CK_DT_BF16, CK_DT_F32)};
	s[n++] = (struct shape){"cast F32->BF16 8192x8192", box2(R, C, 0, CK_DT_F32, CK_DT_BF16)};
	s[n++] = (struct shape){"cast F32->F8_E4M3 8192x8192", box2(R, C, 0, CK_DT_F32, CK_DT_F8_E4M3)};
	s[n++] = (struct shape){"transpose BF16 8192x8192 (tiles)", box2(R, C, 1, CK_DT_BF16, 0)};
	s[n++] = (struct shape){"transpose+cast BF16->F32", box2(R, C, 1, CK_DT_BF16, CK_DT_F32)};
	struct ck_box dq = box2(7168, 18432, 0, CK_DT_F8_E4M3, CK_DT_BF16); /* DeepSeek-V3 w1 */
	dq.scaled = 1;
	dq.scdt = CK_DT_F32;
	dq.sblock[0] = dq.sblock[1] = 128;
	dq.scstride[0] = 18432 / 128, dq.scstride[1] = 1;
	s[n++] = (struct shape){"dequant F8_E4M3x128^2->BF16 7168x18432", dq};
	struct ck_box qkv = box2(8 * 1024, 4096, 0, CK_DT_BF16, CK_DT_F32); /* rows from 3 places */
	qkv.ndim = 3;
	qkv.ext[0] = 8, qkv.ext[1] = 1024, qkv.ext[2] = 4096;
	qkv.sstride[0] = 1024 * 4096, qkv.sstride[1] = 4096, qkv.sstride[2] = 1;
	qkv.dstride[0] = 1536 * 4096, qkv.dstride[1] = 4096, qkv.dstride[2] = 1;
	qkv.sblock[2] = 1;
	s[n++] = (struct shape){"strided rows+cast (QKV-like) BF16->F32", qkv};
	printf("%-42s %10s %10s %8s\n", "kernel on " , "GB/s", "copy GB/s", "ratio");
	printf("(%s; bytes = read + written)\n", ck_gpu_name(g));
	for (int i = 0; i < n; i++) {
		const struct ck_box *b = &s[i].b;
		uint64_t el = ck_box_numel(b);
		double bytes = (double)el * (double)(ck_dtype_size(b->sdt) + ck_dtype_size(b->ddt));
		double ks, cs;
		if (ck_gpu_bench_box(g, b, iters, &ks, &cs, &err) < 0) {
			printf("gpubench: %s\n", err.msg);
			ck_gpu_close(g);
			return 1;
		}
		printf("%-42s %10.0f %10.0f %8.2f\n", s[i].what, bytes / ks / 1e9, bytes / cs / 1e9,
		       cs / ks);
	}
	ck_gpu_close(g);
	return 0;
}
