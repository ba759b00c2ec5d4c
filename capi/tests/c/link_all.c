/* The no-panic check (capi/src/panic.rs): a program that takes the address
 * of every function of ferrite.h. The library's panic handler calls a symbol
 * defined nowhere, so this links (with --gc-sections) only if no panic path
 * is reachable from any of them. `cargo xtask capi` links it for the
 * Cortex-M4F and for the host. */
#include "ferrite.h"

typedef void (*any_fn)(void);

/* Kept by `used`, read through a volatile index so nothing is folded away. */
__attribute__((used)) static const any_fn every_function[] = {
    (any_fn)ferrite_abi_version,
    (any_fn)ferrite_session_len,
    (any_fn)ferrite_model_load,
    (any_fn)ferrite_model_info,
    (any_fn)ferrite_session_init,
    (any_fn)ferrite_feed,
    (any_fn)ferrite_logits,
    (any_fn)ferrite_position,
    (any_fn)ferrite_reset,
    (any_fn)ferrite_seek,
    (any_fn)ferrite_select_memory,
    (any_fn)ferrite_memory_len,
    (any_fn)ferrite_encode_memory,
    (any_fn)ferrite_feed_with_memory,
    (any_fn)ferrite_generate_with_memory,
    (any_fn)ferrite_encode_memory_f16,
    (any_fn)ferrite_feed_with_memory_f16,
    (any_fn)ferrite_generate_with_memory_f16,
    (any_fn)ferrite_memory_rows,
    (any_fn)ferrite_encode_memory_i8,
    (any_fn)ferrite_feed_with_memory_i8,
    (any_fn)ferrite_generate_with_memory_i8,
    (any_fn)ferrite_sampler_init,
    (any_fn)ferrite_sample,
    (any_fn)ferrite_generate,
    (any_fn)ferrite_resume,
    (any_fn)ferrite_tokenize,
    (any_fn)ferrite_detokenize,
    (any_fn)ferrite_snapshot_len,
    (any_fn)ferrite_snapshot,
    (any_fn)ferrite_restore,
    (any_fn)ferrite_update_receive,
    (any_fn)ferrite_update_validate,
    (any_fn)ferrite_update_validate_signed,
    (any_fn)ferrite_strerror,
};

volatile unsigned which;

int main(void) {
    any_fn f = every_function[which % (sizeof every_function / sizeof every_function[0])];
    return f != 0;
}
