/*
 * hit.h - the hit table (record.c: hit_note), shared with entry.S.
 *
 * Default mode records each distinct (probe, destination) once. A probe
 * without a direct destination (indirect jmp and call, ret, syscall)
 * whose destination misses its trampoline's four-entry inline cache calls
 * the runtime even when the pair was recorded long ago: sqlite3's
 * bytecode dispatch does so a quarter of a million times in the
 * benchmark's workload. stint_probe_entry first looks the pair up here,
 * with a handful of instructions that change no flag and touch two
 * registers, and returns at once on a hit; only a miss pays for the full
 * save and the C code.
 *
 * The table is direct-mapped: HIT_SLOTS entries of three words (probe,
 * destination, probe + destination), slot = the low 16 bits of probe +
 * destination. It holds only pairs already in the process's set (the
 * hash set), so a hit skips a call that would have recorded nothing. The
 * third word makes a read torn between two writers of a slot a miss. It
 * lives in the last 2 MiB of the process-wide mapping; a module answers
 * from it only when its word at HIT_MODULE_OFF is nonzero (set at init
 * in default mode without a budget or region log: there a call that
 * records nothing has effects of its own).
 */
#ifndef STINT_HIT_H
#define STINT_HIT_H

#define HIT_ADDR       0x3e5701e00000 /* STINT_GLOBAL_ADDR + 30 MiB (stint.h checks) */
#define HIT_BYTES      0x200000
#define HIT_SLOTS      65536          /* entries of 24 bytes: 1.5 MiB */
#define HIT_MODULE_OFF 356            /* offsetof(struct stint_module, hit) */
#define HIT_PROBE_BACK 32             /* offsetof(struct stint_probe, module_back) */

#endif
