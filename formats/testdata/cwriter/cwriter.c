/*
 * cwriter.c - writes a trace stream from the templates in stint_arrow.h
 * the way the runtime does, to prove the header's contract (see
 * TestCWriter in formats/cwriter_test.go, which builds and runs it):
 *
 *   gcc -std=c11 -O1 -Wall -Wextra -Werror -I runtime/include \
 *       -o cwriter formats/testdata/cwriter/cwriter.c
 *   ./cwriter OUT [zeros]
 *
 * Batches of 3, 1, 7 and 5 rows; each batch's column buffers sit at fixed
 * capacity-sized slots (so the buffer lengths are shorter than the
 * slots); every batch is sealed by writing its continuation marker last.
 * With "zeros" the stream ends as after a crash: a filled but unsealed
 * batch and zero bytes, no end-of-stream marker.
 * Value of row g (counted over the whole stream), mirrored by the test:
 *   kind = 1 + g%9, tid = 100 + batch, time = 1000000 + 3g,
 *   src_module = g%2, src = 0x401000 + 16g,
 *   dst_module = g%5 == 0 ? 0xffff : g%2, dst = 0x402000 + 8g (0 for syscall),
 *   value = kind == 8 ? 60 + g : 0.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "stint_arrow.h"

#define CAP 8 /* rows per batch slot */

static unsigned char out[1 << 20];
static size_t pos;

static void put64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }

static size_t slot_size(int c) { return ((size_t)CAP * stint_arrow_col_width[c] + 7) & ~(size_t)7; }

static void batch(int b, int rows, uint64_t *g, int seal)
{
	unsigned char *m = out + pos;
	unsigned char *body = m + STINT_ARROW_BATCH_LEN;
	size_t off = 0;
	memcpy(m, stint_arrow_batch, STINT_ARROW_BATCH_LEN);
	memset(m, 0, 4); /* the continuation marker comes last */
	for (int c = 0; c < STINT_ARROW_NCOLS; c++) {
		put64(m + stint_arrow_batch_off_node_len[c], (uint64_t)rows);
		put64(m + stint_arrow_batch_off_buf_off[2 * c + 1], off);
		put64(m + stint_arrow_batch_off_buf_len[2 * c + 1], (uint64_t)rows * stint_arrow_col_width[c]);
		for (int i = 0; i < rows; i++) {
			uint64_t x = *g + (uint64_t)i;
			uint8_t kind = (uint8_t)(1 + x % 9);
			unsigned char *p = body + off + (size_t)i * stint_arrow_col_width[c];
			uint8_t u8;
			uint16_t u16;
			uint32_t u32;
			uint64_t u64;
			switch (c) {
			case STINT_COL_KIND: u8 = kind; memcpy(p, &u8, 1); break;
			case STINT_COL_TID: u32 = 100u + (uint32_t)b; memcpy(p, &u32, 4); break;
			case STINT_COL_TIME: u64 = 1000000 + 3 * x; memcpy(p, &u64, 8); break;
			case STINT_COL_SRC_MODULE: u16 = (uint16_t)(x % 2); memcpy(p, &u16, 2); break;
			case STINT_COL_SRC: u64 = 0x401000 + 16 * x; memcpy(p, &u64, 8); break;
			case STINT_COL_DST_MODULE: u16 = x % 5 == 0 ? STINT_ARROW_NO_MODULE : (uint16_t)(x % 2); memcpy(p, &u16, 2); break;
			case STINT_COL_DST: u64 = kind == 8 ? 0 : 0x402000 + 8 * x; memcpy(p, &u64, 8); break;
			case STINT_COL_VALUE: u64 = kind == 8 ? 60 + x : 0; memcpy(p, &u64, 8); break;
			}
		}
		off += slot_size(c);
	}
	put64(m + STINT_ARROW_BATCH_OFF_ROWS, (uint64_t)rows);
	put64(m + STINT_ARROW_BATCH_OFF_BODYLEN, off);
	if (seal)
		memset(m, 0xff, 4);
	pos += STINT_ARROW_BATCH_LEN + off;
	*g += (uint64_t)rows;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: cwriter OUT [zeros]\n");
		return 2;
	}
	int crash = argc > 2 && strcmp(argv[2], "zeros") == 0;
	static const char run[] =
		"{\"binary\":\"/usr/bin/cwriter\",\"build_id\":\"c0ffee\",\"tool\":\"branch\","
		"\"options\":\"tool=branch every=1\",\"pid\":77,\"ppid\":7,"
		"\"start_ns\":1795000000123456789,\"mono_start_ns\":999000}";
	static const char mods[] =
		"{\"id\":0,\"path\":\"/usr/bin/cwriter\",\"build_id\":\"c0ffee\",\"base\":93824992231424,\"size\":8192,\"rewritten\":true}\n"
		"{\"id\":1,\"path\":\"/lib/x86_64-linux-gnu/libc.so.6\",\"build_id\":\"\",\"base\":140737351516160,\"size\":1921024,\"rewritten\":false}\n"
		"{\"id\":2,\"path\":\"/half/writ";
	_Static_assert(sizeof run - 1 <= STINT_ARROW_META_RUN_CAP, "run fits");
	_Static_assert(sizeof mods - 1 <= STINT_ARROW_META_MODULES_CAP, "modules fit");

	memcpy(out, stint_arrow_schema, STINT_ARROW_SCHEMA_LEN);
	memcpy(out + STINT_ARROW_META_RUN_OFF, run, sizeof run - 1);
	memcpy(out + STINT_ARROW_META_MODULES_OFF, mods, sizeof mods - 1);
	pos = STINT_ARROW_SCHEMA_LEN;

	uint64_t g = 0;
	static const int rows[] = {3, 1, 7, 5};
	for (int b = 0; b < 4; b++)
		batch(b, rows[b], &g, 1);
	if (crash) {
		batch(4, 2, &g, 0);
		pos += 4096; /* the reserve beyond: zeros */
	} else {
		static const unsigned char eos[8] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0};
		memcpy(out + pos, eos, 8);
		pos += 8;
	}
	FILE *f = fopen(argv[1], "wb");
	if (!f || fwrite(out, 1, pos, f) != pos || fclose(f) != 0) {
		perror(argv[1]);
		return 1;
	}
	return 0;
}
