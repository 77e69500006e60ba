/* Fuzz target: tokenizer files beside a checkpoint (the GGUF view). The
 * first byte picks the file the rest becomes: even, a SentencePiece
 * tokenizer.model (protobuf); odd, a tokenizer.json (byte-level or
 * SentencePiece-style BPE), for a model of 300 token embeddings. Files go
 * to a per-process directory. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ckpt/tokenizer.h"
#include "fuzz_scratch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const FILES[] = {"tokenizer.model", "tokenizer.json", NULL};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *dir = scratch("ckptfs-fuzz-tok", FILES);
	if (!dir || size < 1)
		return 0;
	char spm[128], bpe[128];
	snprintf(spm, sizeof spm, "%s/tokenizer.model", dir);
	snprintf(bpe, sizeof bpe, "%s/tokenizer.json", dir);
	unlink(spm);
	unlink(bpe);
	FILE *f = fopen(data[0] % 2 ? bpe : spm, "wb");
	if (!f)
		return 0;
	fwrite(data + 1, 1, size - 1, f);
	fclose(f);
	struct ck_vocab v;
	struct ck_err err;
	if (ck_vocab_load(dir, NULL, 300, 1, NULL, &v, &err) == 0)
		ck_vocab_free(&v);
	return 0;
}
