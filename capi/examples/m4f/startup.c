/* Start-up for the Cortex-M4F of QEMU's mps2-an386 (the m4f board):
 * vector table, .data/.bss set-up, FPU on, stack painted (to measure its
 * peak), SysTick as an instruction counter, and Arm semihosting for output
 * and exit. Plain C, no vendor SDK: a real board's start-up code replaces it. */
#include <stdint.h>
#include <string.h>

#include "board.h"

extern uint32_t _sidata, _sdata, _edata, _sbss, _ebss, _stack_top;
int main(void);

/* ---- semihosting (the debugger / QEMU prints and exits for us) ---- */

static int semihost(int op, const void *arg) {
    register int r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

enum { SYS_OPEN = 0x01, SYS_WRITE = 0x05, SYS_EXIT = 0x18 };

static int stdout_handle = -1;

void board_write(const void *bytes, size_t len) {
    if (stdout_handle < 0) {
        static const char tt[] = ":tt";
        uint32_t args[3] = {(uint32_t)tt, 4 /* "w" */, 3};
        stdout_handle = semihost(SYS_OPEN, args);
    }
    uint32_t args[3] = {(uint32_t)stdout_handle, (uint32_t)bytes, (uint32_t)len};
    semihost(SYS_WRITE, args);
}

void board_exit(int status) {
    /* ADP_Stopped_ApplicationExit: QEMU exits 0; anything else: 1. */
    uint32_t reason = status == 0 ? 0x20026 : 0x20024 /* RunTimeErrorUnknown */;
    semihost(SYS_EXIT, (const void *)reason);
    for (;;) {
    }
}

/* The C library's abort(), which the ferrite library's panic handler calls. */
void abort(void) {
    static const char msg[] = "abort\n";
    board_write(msg, sizeof msg - 1);
    board_exit(1);
    for (;;) {
    }
}

/* ---- instruction counter: SysTick at the core clock, 24 bits, widened ---- */

#define SYST_CSR (*(volatile uint32_t *)0xE000E010)
#define SYST_RVR (*(volatile uint32_t *)0xE000E014)
#define SYST_CVR (*(volatile uint32_t *)0xE000E018)
static volatile uint32_t wraps;

static void systick_handler(void) { wraps++; }

void board_counter_start(void) {
    SYST_RVR = 0x00FFFFFF;
    SYST_CVR = 0;
    SYST_CSR = 0x7; /* core clock, interrupt, enable */
    while (SYST_CVR == 0) {
    }
}

uint64_t board_ticks(void) {
    for (;;) {
        uint32_t before = wraps, current = SYST_CVR;
        if (wraps == before) {
            return (uint64_t)before * 0x01000000u + (0x00FFFFFFu - current);
        }
    }
}

/* ---- stack painting: the peak is the lowest word no longer painted ---- */

#define PAINT 0xCAFEF00Du

size_t board_stack_peak(void) {
    const uint32_t *p = &_ebss;
    while (p < &_stack_top && *p == PAINT) {
        p++;
    }
    return (size_t)((const uint8_t *)&_stack_top - (const uint8_t *)p);
}

static void fault_handler(void) {
    static const char msg[] = "fault\n";
    board_write(msg, sizeof msg - 1);
    board_exit(1);
}

__attribute__((noreturn)) void reset_handler(void) {
    /* FPU: full access to CP10 and CP11, before any floating-point code. */
    *(volatile uint32_t *)0xE000ED88 |= 0xFu << 20;
    __asm__ volatile("dsb\n\tisb" ::: "memory");
    memcpy(&_sdata, &_sidata, (size_t)((uint8_t *)&_edata - (uint8_t *)&_sdata));
    memset(&_sbss, 0, (size_t)((uint8_t *)&_ebss - (uint8_t *)&_sbss));
    /* Paint from the end of .bss to 256 bytes below this frame. */
    uint32_t *sp;
    __asm__ volatile("mov %0, sp" : "=r"(sp));
    for (uint32_t *p = &_ebss; p < sp - 64; p++) {
        *p = PAINT;
    }
    board_exit(main());
}

typedef void (*vector)(void);

__attribute__((section(".vector_table"), used)) static const vector vectors[16] = {
    (vector)&_stack_top, reset_handler, fault_handler, fault_handler, fault_handler,
    fault_handler,       fault_handler, 0,             0,             0,
    0,                   0,             0,             0,             0,
    systick_handler,
};
