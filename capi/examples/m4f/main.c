/* ferrite from C on a Cortex-M4F: the image in flash, the session in a
 * static buffer sized at build time, a prompt tokenized by the image's
 * tokenizer, N tokens generated with a callback that streams their text.
 * Prints what the Rust `generate` firmware prints (boards/src/generate.rs):
 * the text, `tokens:`, `tokens_hash:`, `checksum:` (FNV-1a of the last
 * step's logits and their f32 sum) and a `run:` line, so `cargo xtask capi`
 * compares the two. */
#include <stdio.h>
#include <string.h>

#include "board.h"
#include "ferrite.h"
#include "model_size.h" /* FERRITE_SESSION_BYTES, written by the sizer at build time */

#ifndef PROMPT
#define PROMPT "Once upon a time"
#endif
#ifndef N
#define N 32
#endif

extern const uint8_t model_fer[], model_fer_end[]; /* model.S: 16-byte aligned, in flash */

static ferrite_model model;
static ferrite_session session;
static ferrite_sampler sampler;
static float session_buf[FERRITE_SESSION_BYTES / 4]; /* all the RAM the model needs */
static uint32_t prompt_ids[sizeof PROMPT];            /* no tokenizer makes more ids than bytes */

static void print(const char *s) { board_write(s, strlen(s)); }

/* Generated text, as the Rust boards show it (boards/src/console.rs): control
 * bytes but \n and \t as \xNN, so a random model cannot drive the terminal. */
static void print_text(const uint8_t *bytes, size_t len) {
    for (size_t i = 0; i < len; i++) {
        uint8_t b = bytes[i];
        if ((b < 0x20 && b != '\n' && b != '\t') || b == 0x7f) {
            char esc[5];
            snprintf(esc, sizeof esc, "\\x%02x", b);
            print(esc);
        } else {
            board_write(&b, 1);
        }
    }
}

/* A u64 in decimal (newlib-nano's printf has no %llu). */
static const char *u64_str(uint64_t v, char buf[21]) {
    char *p = buf + 20;
    *p = 0;
    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return p;
}

static uint32_t fnv_word(uint32_t h, uint32_t word) {
    for (int i = 0; i < 4; i++) {
        h = (h ^ ((word >> (8 * i)) & 0xff)) * 0x01000193u;
    }
    return h;
}

struct run {
    uint32_t tokens[N];
    size_t n;
    uint32_t ids_fnv;
};

/* Called with each generated token: record it, hash it, stream its text. */
static bool on_token(uint32_t token, void *user_data) {
    struct run *r = user_data;
    if (r->n < N) {
        r->tokens[r->n] = token;
    }
    r->n++;
    r->ids_fnv = fnv_word(r->ids_fnv, token);
    const uint8_t *text;
    size_t len;
    if (ferrite_detokenize(&model, token, &text, &len) == FERRITE_OK) {
        print_text(text, len);
    }
    return true;
}

static int fail(const char *what, int32_t rc) {
    char line[160];
    snprintf(line, sizeof line, "error: %s: %s (%ld)\n", what, ferrite_strerror(rc), (long)rc);
    print(line);
    return 1;
}

int main(void) {
    char line[200];
    int32_t rc;
    if (ferrite_abi_version() != FERRITE_ABI_VERSION) {
        return fail("ABI version", FERRITE_E_UNKNOWN);
    }
    size_t image_len = (size_t)(model_fer_end - model_fer);
    if ((rc = ferrite_model_load(model_fer, image_len, &model)) != FERRITE_OK) {
        return fail("ferrite_model_load", rc);
    }
    if ((rc = ferrite_session_init(&model, session_buf, sizeof session_buf, &session)) != FERRITE_OK) {
        return fail("ferrite_session_init", rc);
    }
    size_t k = 0;
    rc = ferrite_tokenize(&model, (const uint8_t *)PROMPT, sizeof PROMPT - 1, prompt_ids,
                          sizeof prompt_ids / sizeof prompt_ids[0], &k);
    if (rc != FERRITE_OK) {
        return fail("ferrite_tokenize", rc);
    }
    if ((rc = ferrite_sampler_init(&sampler, NULL)) != FERRITE_OK) { /* greedy */
        return fail("ferrite_sampler_init", rc);
    }
    ferrite_info info;
    if ((rc = ferrite_model_info(&model, &info)) != FERRITE_OK) {
        return fail("ferrite_model_info", rc);
    }

    print_text((const uint8_t *)PROMPT, sizeof PROMPT - 1);
    static struct run r = {{0}, 0, 0x811c9dc5u};
    size_t generated = 0;
    board_counter_start();
    uint64_t start = board_ticks();
    rc = ferrite_generate(&session, prompt_ids, k, N, &sampler, on_token, &r, &generated);
    uint64_t end = board_ticks();
    if (rc != FERRITE_OK) {
        return fail("ferrite_generate", rc);
    }
    print("\n");

    const float *logits;
    size_t n_logits;
    if ((rc = ferrite_logits(&session, &logits, &n_logits)) != FERRITE_OK) {
        return fail("ferrite_logits", rc);
    }
    uint32_t logits_fnv = 0x811c9dc5u;
    float sum = 0.0f;
    for (size_t i = 0; i < n_logits; i++) {
        uint32_t bits;
        memcpy(&bits, &logits[i], 4);
        logits_fnv = fnv_word(logits_fnv, bits);
        sum += logits[i];
    }
    uint32_t sum_bits;
    memcpy(&sum_bits, &sum, 4);

    print("tokens: ");
    for (size_t i = 0; i < generated && i < N; i++) {
        snprintf(line, sizeof line, i ? ",%lu" : "%lu", (unsigned long)r.tokens[i]);
        print(line);
    }
    snprintf(line, sizeof line, "\ntokens_hash: fnv1a=0x%08lx count=%lu\n", (unsigned long)r.ids_fnv,
             (unsigned long)generated);
    print(line);
    snprintf(line, sizeof line, "checksum: fnv1a=0x%08lx sum_bits=0x%08lx\n",
             (unsigned long)logits_fnv, (unsigned long)sum_bits);
    print(line);
    /* Instructions: 40 per tick of the 25 MHz SysTick under -icount shift=0. */
    uint64_t instructions = (end - start) * 40u;
    size_t fed = k - 1 + generated;
    char total[21], per_token[21];
    snprintf(line, sizeof line,
             "run: board=m4f-c prompt_tokens=%lu tokens=%lu instructions=%s "
             "instructions_per_token=%s stack_bytes=%lu state_bytes=%lu session_bytes=%lu\n",
             (unsigned long)k, (unsigned long)generated, u64_str(instructions, total),
             u64_str(instructions / fed, per_token), (unsigned long)board_stack_peak(),
             (unsigned long)info.state_bytes, (unsigned long)sizeof session_buf);
    print(line);
    return 0;
}
