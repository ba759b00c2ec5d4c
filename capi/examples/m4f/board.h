/* What startup.c gives main.c: output, exit, the instruction counter and
 * the stack's peak (QEMU's mps2-an386; a real board has its own). */
#ifndef BOARD_H
#define BOARD_H
#include <stddef.h>
#include <stdint.h>

void board_write(const void *bytes, size_t len);
void board_exit(int status) __attribute__((noreturn));
void board_counter_start(void);
/* SysTick ticks since board_counter_start(); under QEMU's
 * `-icount shift=0` one tick of the 25 MHz clock is 40 instructions. */
uint64_t board_ticks(void);
size_t board_stack_peak(void);
#endif
