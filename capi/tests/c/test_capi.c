/* The host test of the C API: every function of ferrite.h with good and bad
 * inputs (null pointers, short buffers, corrupt and misaligned images, bad
 * tokens, bad options), checking the status codes and that the results agree
 * with each other. Built by `cargo xtask capi` with
 * gcc -fsanitize=address,undefined against the host libferrite_capi.a
 * (features: the defaults and `verify`); run with an image path
 * (tests/images/tiny_int8.fer) and, optionally, an image with cross layers
 * of 2 baked memories (the hybrid_gdn_cross fixture). Exit status 0 when
 * every check passes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferrite.h"

static int failures, checks;

#define CHECK(cond)                                                             \
    do {                                                                        \
        checks++;                                                               \
        if (!(cond)) {                                                          \
            failures++;                                                         \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                       \
    } while (0)

/* `call` returns `code` (and says which it got when not). */
#define EXPECT(code, call)                                                      \
    do {                                                                        \
        int32_t got_ = (call);                                                  \
        checks++;                                                               \
        if (got_ != (code)) {                                                   \
            failures++;                                                         \
            fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d (%s)\n",   \
                    __FILE__, __LINE__, #call, got_, ferrite_strerror(got_),     \
                    (int)(code), ferrite_strerror(code));                       \
        }                                                                       \
    } while (0)

/* A copy of `len` bytes of `src` at `offset` bytes past a 16-byte boundary. */
static uint8_t *copy_at(const uint8_t *src, size_t len, size_t offset, void **block) {
    *block = aligned_alloc(16, (len + offset + 15) / 16 * 16);
    if (!*block) {
        perror("aligned_alloc");
        exit(2);
    }
    memcpy((uint8_t *)*block + offset, src, len);
    return (uint8_t *)*block + offset;
}

static uint8_t *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        perror(path);
        exit(2);
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* Token callback: records tokens into a buffer; stops after `stop_after`. */
/* The value of IEEE 754 binary16 bits `h` (exact in a float). */
static float half_to_float(uint16_t h) {
    unsigned exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    float v;
    if (exp == 0) {
        v = ldexpf((float)man, -24);
    } else if (exp == 31) {
        v = man ? NAN : INFINITY;
    } else {
        v = ldexpf((float)(man | 0x400), (int)exp - 25);
    }
    return (h & 0x8000) ? -v : v;
}

struct record {
    uint32_t tokens[64];
    size_t n;
    size_t stop_after;
};

static bool record_token(uint32_t token, void *user_data) {
    struct record *r = user_data;
    if (r->n < sizeof r->tokens / sizeof r->tokens[0]) {
        r->tokens[r->n] = token;
    }
    r->n++;
    return r->stop_after == 0 || r->n < r->stop_after;
}

/* An update source over memory: delivers `len` bytes in pieces of `piece`,
 * or fails (-1) once `fail_at` bytes were delivered. */
struct source {
    const uint8_t *data;
    size_t len, at, piece, fail_at;
};

static intptr_t read_source(uint8_t *buf, size_t len, void *user_data) {
    struct source *s = user_data;
    if (s->fail_at && s->at >= s->fail_at) {
        return -1;
    }
    size_t n = len < s->piece ? len : s->piece;
    if (n > s->len - s->at) {
        n = s->len - s->at;
    }
    memcpy(buf, s->data + s->at, n);
    s->at += n;
    return (intptr_t)n;
}

static const int32_t ALL_CODES[] = {
    FERRITE_OK, FERRITE_E_BAD_MAGIC, FERRITE_E_UNSUPPORTED_VERSION, FERRITE_E_TRUNCATED,
    FERRITE_E_CRC_MISMATCH, FERRITE_E_IMAGE_MISALIGNED, FERRITE_E_BAD_HEADER,
    FERRITE_E_BAD_CONFIG, FERRITE_E_BAD_TENSOR, FERRITE_E_UNKNOWN_DTYPE,
    FERRITE_E_MISSING_TENSOR, FERRITE_E_SHAPE_MISMATCH, FERRITE_E_BUFFER_TOO_SMALL,
    FERRITE_E_TOKEN_OUT_OF_RANGE, FERRITE_E_TOO_MANY_PINNED, FERRITE_E_BAD_SAMPLER,
    FERRITE_E_BAD_PROMPT, FERRITE_E_BAD_TOKENIZER, FERRITE_E_INTERNAL,
    FERRITE_E_SIZE_OVERFLOW, FERRITE_E_POSITION_OVERFLOW, FERRITE_E_BAD_SNAPSHOT,
    FERRITE_E_NO_SUCH_MEMORY, FERRITE_E_BAD_MEMORY, FERRITE_E_UNKNOWN, FERRITE_E_NULL_POINTER, FERRITE_E_MISALIGNED, FERRITE_E_BAD_HANDLE,
    FERRITE_E_BAD_ARGUMENT, FERRITE_E_NOT_BUILT, FERRITE_E_UPDATE_NO_HEADER,
    FERRITE_E_UPDATE_TOO_LARGE, FERRITE_E_UPDATE_INTERRUPTED, FERRITE_E_UPDATE_READ_ERROR,
    FERRITE_E_UPDATE_SESSION_TOO_LARGE, FERRITE_E_UNSIGNED, FERRITE_E_UNTRUSTED_KEY,
    FERRITE_E_BAD_SIGNATURE, FERRITE_E_ROLLBACK,
};

static void test_codes(void) {
    size_t n = sizeof ALL_CODES / sizeof ALL_CODES[0];
    const char *unknown = ferrite_strerror(12345);
    CHECK(unknown && strcmp(unknown, "unknown error code") == 0);
    for (size_t i = 0; i < n; i++) {
        const char *m = ferrite_strerror(ALL_CODES[i]);
        CHECK(m && m[0] && strcmp(m, unknown) != 0);
        for (size_t j = 0; j < i; j++) {
            CHECK(ALL_CODES[i] != ALL_CODES[j] && strcmp(m, ferrite_strerror(ALL_CODES[j])) != 0);
        }
    }
    CHECK(ferrite_abi_version() == FERRITE_ABI_VERSION);
}

static void test_image_checks(const uint8_t *image, size_t len) {
    size_t bytes = 0;
    EXPECT(FERRITE_OK, ferrite_session_len(image, len, &bytes));
    CHECK(bytes > 0 && bytes % 4 == 0);
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_session_len(NULL, len, &bytes));
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_session_len(image, len, NULL));
    EXPECT(FERRITE_E_TRUNCATED, ferrite_session_len(image, 10, &bytes));

    ferrite_model model;
    void *block;
    uint8_t *bad = copy_at(image, len, 0, &block);
    bad[0] ^= 0xff;
    EXPECT(FERRITE_E_BAD_MAGIC, ferrite_session_len(bad, len, &bytes));
    EXPECT(FERRITE_E_BAD_MAGIC, ferrite_model_load(bad, len, &model));
    bad[0] ^= 0xff;
    bad[len - 1] ^= 0x01; /* a weight byte: the CRC catches it */
    EXPECT(FERRITE_E_CRC_MISMATCH, ferrite_model_load(bad, len, &model));
    bad[len - 1] ^= 0x01;
    EXPECT(FERRITE_E_TRUNCATED, ferrite_model_load(bad, len - 1, &model));
    EXPECT(FERRITE_E_TRUNCATED, ferrite_model_load(bad, 0, &model));
    EXPECT(FERRITE_OK, ferrite_model_load(bad, len, &model));
    free(block);

    for (size_t offset = 1; offset < 16; offset *= 2) {
        uint8_t *odd = copy_at(image, len, offset, &block);
        EXPECT(FERRITE_E_IMAGE_MISALIGNED, ferrite_model_load(odd, len, &model));
        /* Sizing needs no alignment. */
        EXPECT(FERRITE_OK, ferrite_session_len(odd, len, &bytes));
        free(block);
    }
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_model_load(NULL, len, &model));
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_model_load(image, len, NULL));
    uint64_t room[sizeof(ferrite_model) / 8 + 1];
    EXPECT(FERRITE_E_MISALIGNED,
           ferrite_model_load(image, len, (ferrite_model *)((uint8_t *)room + 4)));

    ferrite_model zeroed;
    memset(&zeroed, 0, sizeof zeroed);
    ferrite_info info;
    EXPECT(FERRITE_E_BAD_HANDLE, ferrite_model_info(&zeroed, &info));
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_model_info(NULL, &info));
}

/* Feeds `prompt` then `n` greedy tokens by hand (feed + sample). */
static void by_hand(ferrite_session *s, const uint32_t *prompt, size_t k, size_t n,
                    uint32_t *out) {
    ferrite_sampler greedy;
    EXPECT(FERRITE_OK, ferrite_sampler_init(&greedy, NULL));
    const float *logits = NULL;
    size_t count = 0;
    for (size_t i = 0; i < k; i++) {
        EXPECT(FERRITE_OK, ferrite_feed(s, prompt[i], &logits, &count));
    }
    for (size_t i = 0; i < n; i++) {
        EXPECT(FERRITE_OK, ferrite_sample(&greedy, logits, count, &out[i]));
        if (i + 1 < n) {
            EXPECT(FERRITE_OK, ferrite_feed(s, out[i], &logits, &count));
        }
    }
}

static void test_session(const uint8_t *image, size_t len) {
    ferrite_model model;
    ferrite_info info;
    EXPECT(FERRITE_OK, ferrite_model_load(image, len, &model));
    EXPECT(FERRITE_OK, ferrite_model_info(&model, &info));
    size_t bytes = 0;
    EXPECT(FERRITE_OK, ferrite_session_len(image, len, &bytes));
    CHECK(info.session_bytes == bytes);
    CHECK(info.state_bytes > 0 && info.state_bytes < bytes);
    CHECK(info.vocab_size >= 256 && info.num_layers > 0 && info.hidden_size > 0);
    CHECK(info.snapshot_bytes > info.state_bytes);

    float *buf = malloc(bytes + 8);
    ferrite_session s;
    EXPECT(FERRITE_E_BUFFER_TOO_SMALL, ferrite_session_init(&model, buf, bytes - 4, &s));
    EXPECT(FERRITE_E_MISALIGNED, ferrite_session_init(&model, (uint8_t *)buf + 2, bytes, &s));
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_session_init(&model, NULL, bytes, &s));
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_session_init(&model, buf, bytes, NULL));
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_session_init(NULL, buf, bytes, &s));
    ferrite_session zeroed;
    memset(&zeroed, 0, sizeof zeroed);
    EXPECT(FERRITE_E_BAD_HANDLE, ferrite_feed(&zeroed, 1, NULL, NULL));
    EXPECT(FERRITE_E_BAD_HANDLE, ferrite_reset(&zeroed));
    EXPECT(FERRITE_OK, ferrite_session_init(&model, buf, bytes, &s));

    const float *logits = NULL;
    size_t n = 0;
    uint64_t pos = 99;
    EXPECT(FERRITE_E_BAD_PROMPT, ferrite_logits(&s, &logits, &n));
    EXPECT(FERRITE_E_TOKEN_OUT_OF_RANGE, ferrite_feed(&s, info.vocab_size, &logits, &n));
    EXPECT(FERRITE_E_TOKEN_OUT_OF_RANGE, ferrite_feed(&s, UINT32_MAX, NULL, NULL));
    EXPECT(FERRITE_OK, ferrite_position(&s, &pos));
    CHECK(pos == 0); /* a refused token leaves the state */
    EXPECT(FERRITE_OK, ferrite_feed(&s, 'H', &logits, &n));
    CHECK(logits != NULL && n == info.vocab_size);
    for (size_t i = 0; i < n; i++) {
        CHECK(isfinite(logits[i]));
    }
    const float *again = NULL;
    size_t m = 0;
    EXPECT(FERRITE_OK, ferrite_logits(&s, &again, &m));
    CHECK(again == logits && m == n);
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_logits(&s, NULL, &m));
    EXPECT(FERRITE_OK, ferrite_feed(&s, 'i', NULL, NULL));
    EXPECT(FERRITE_OK, ferrite_position(&s, &pos));
    CHECK(pos == 2);
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_position(&s, NULL));

    /* Seek to the last position: no token can be fed there. */
    EXPECT(FERRITE_OK, ferrite_seek(&s, UINT64_MAX));
    EXPECT(FERRITE_E_POSITION_OVERFLOW, ferrite_feed(&s, 'a', NULL, NULL));
    EXPECT(FERRITE_OK, ferrite_reset(&s));
    EXPECT(FERRITE_OK, ferrite_position(&s, &pos));
    CHECK(pos == 0);
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_reset(NULL));
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_seek(NULL, 3));
    /* The first image has no cross layer: no memory to select. */
    EXPECT(FERRITE_E_NO_SUCH_MEMORY, ferrite_select_memory(&s, 0));
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_select_memory(NULL, 0));
    EXPECT(FERRITE_E_BAD_HANDLE, ferrite_select_memory(&zeroed, 0));

    /* Samplers. */
    ferrite_sampler sampler;
    ferrite_sampler_config bad[] = {
        {-1.0f, 0, 1.0f, 0}, {NAN, 0, 1.0f, 0}, {INFINITY, 0, 1.0f, 0},
        {1.0f, 65, 1.0f, 0}, {1.0f, 0, 0.0f, 0}, {1.0f, 0, 1.5f, 0}, {1.0f, 0, NAN, 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        EXPECT(FERRITE_E_BAD_SAMPLER, ferrite_sampler_init(&sampler, &bad[i]));
    }
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_sampler_init(NULL, NULL));
    EXPECT(FERRITE_OK, ferrite_sampler_init(&sampler, NULL));
    uint32_t token = 0;
    float three[3] = {0.5f, 2.0f, -1.0f};
    EXPECT(FERRITE_OK, ferrite_sample(&sampler, three, 3, &token));
    CHECK(token == 1);
    EXPECT(FERRITE_E_BAD_ARGUMENT, ferrite_sample(&sampler, three, 0, &token));
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_sample(&sampler, NULL, 3, &token));
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_sample(&sampler, three, 3, NULL));
    EXPECT(FERRITE_E_MISALIGNED,
           ferrite_sample(&sampler, (const float *)((const uint8_t *)three + 1), 2, &token));
    ferrite_sampler zs;
    memset(&zs, 0, sizeof zs);
    EXPECT(FERRITE_E_BAD_HANDLE, ferrite_sample(&zs, three, 3, &token));

    /* Tokenizer: the prompt round-trips. */
    const char *text = "Hello, world";
    size_t text_len = strlen(text);
    uint32_t prompt[32];
    size_t k = 0;
    EXPECT(FERRITE_OK, ferrite_tokenize(&model, (const uint8_t *)text, text_len, prompt, 32, &k));
    CHECK(k > 0 && k <= text_len);
    EXPECT(FERRITE_E_BAD_PROMPT,
           ferrite_tokenize(&model, (const uint8_t *)text, text_len, prompt, k - 1, &k));
    EXPECT(FERRITE_E_NULL_POINTER,
           ferrite_tokenize(&model, (const uint8_t *)text, text_len, NULL, 32, &k));
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_tokenize(&model, NULL, text_len, prompt, 32, &k));
    EXPECT(FERRITE_OK, ferrite_tokenize(&model, (const uint8_t *)text, text_len, prompt, 32, &k));
    char back[64];
    size_t at = 0;
    for (size_t i = 0; i < k; i++) {
        const uint8_t *piece = NULL;
        size_t piece_len = 0;
        EXPECT(FERRITE_OK, ferrite_detokenize(&model, prompt[i], &piece, &piece_len));
        if (at + piece_len < sizeof back) {
            memcpy(back + at, piece, piece_len);
        }
        at += piece_len;
    }
    CHECK(at == text_len && memcmp(back, text, text_len) == 0);
    const uint8_t *piece = NULL;
    size_t piece_len = 0;
    EXPECT(FERRITE_E_TOKEN_OUT_OF_RANGE,
           ferrite_detokenize(&model, info.vocab_size, &piece, &piece_len));
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_detokenize(&model, 1, NULL, &piece_len));

    /* Generation: what generate streams is what feed + sample give. */
    enum { N = 12 };
    struct record r = {{0}, 0, 0};
    size_t generated = 0;
    EXPECT(FERRITE_OK, ferrite_reset(&s));
    EXPECT(FERRITE_OK, ferrite_sampler_init(&sampler, NULL));
    EXPECT(FERRITE_OK, ferrite_generate(&s, prompt, k, N, &sampler, record_token, &r, &generated));
    CHECK(generated == N && r.n == N);
    EXPECT(FERRITE_OK, ferrite_position(&s, &pos));
    CHECK(pos == k + N - 1);
    uint32_t manual[N];
    EXPECT(FERRITE_OK, ferrite_reset(&s));
    by_hand(&s, prompt, k, N, manual);
    CHECK(memcmp(manual, r.tokens, sizeof manual) == 0);

    struct record early = {{0}, 0, 3};
    EXPECT(FERRITE_OK, ferrite_reset(&s));
    EXPECT(FERRITE_OK,
           ferrite_generate(&s, prompt, k, N, &sampler, record_token, &early, &generated));
    CHECK(generated == 3 && memcmp(early.tokens, r.tokens, 3 * sizeof(uint32_t)) == 0);
    EXPECT(FERRITE_OK, ferrite_generate(&s, prompt, k, N, &sampler, NULL, NULL, NULL));
    EXPECT(FERRITE_E_BAD_PROMPT, ferrite_generate(&s, prompt, 0, N, &sampler, NULL, NULL, NULL));
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_generate(&s, NULL, k, N, &sampler, NULL, NULL, NULL));
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_generate(&s, prompt, k, N, NULL, NULL, NULL, NULL));
    uint32_t bad_prompt[2] = {'a', info.vocab_size + 7};
    EXPECT(FERRITE_E_TOKEN_OUT_OF_RANGE,
           ferrite_generate(&s, bad_prompt, 2, N, &sampler, NULL, NULL, NULL));

    /* A seeded sampler draws the same tokens twice, and not only the greedy ones. */
    ferrite_sampler_config hot = {1.5f, 40, 0.95f, 42};
    struct record a = {{0}, 0, 0}, b = {{0}, 0, 0};
    EXPECT(FERRITE_OK, ferrite_sampler_init(&sampler, &hot));
    EXPECT(FERRITE_OK, ferrite_reset(&s));
    EXPECT(FERRITE_OK, ferrite_generate(&s, prompt, k, 32, &sampler, record_token, &a, NULL));
    EXPECT(FERRITE_OK, ferrite_sampler_init(&sampler, &hot));
    EXPECT(FERRITE_OK, ferrite_reset(&s));
    EXPECT(FERRITE_OK, ferrite_generate(&s, prompt, k, 32, &sampler, record_token, &b, NULL));
    CHECK(a.n == 32 && memcmp(a.tokens, b.tokens, sizeof(uint32_t) * 32) == 0);

    /* Snapshots: restore and resume continue the stream exactly. */
    size_t snap_len = 0;
    EXPECT(FERRITE_OK, ferrite_snapshot_len(&s, &snap_len));
    CHECK(snap_len == info.snapshot_bytes);
    uint8_t *snap = malloc(snap_len);
    size_t written = 0;
    EXPECT(FERRITE_OK, ferrite_reset(&s));
    EXPECT(FERRITE_E_BAD_PROMPT, ferrite_resume(&s, 4, &sampler, NULL, NULL, NULL));
    EXPECT(FERRITE_OK, ferrite_sampler_init(&sampler, NULL));
    EXPECT(FERRITE_OK, ferrite_generate(&s, prompt, k, 1, &sampler, NULL, NULL, NULL));
    EXPECT(FERRITE_E_BAD_SNAPSHOT, ferrite_snapshot(&s, snap, snap_len - 1, &written));
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_snapshot(&s, NULL, snap_len, &written));
    EXPECT(FERRITE_OK, ferrite_snapshot(&s, snap, snap_len, &written));
    CHECK(written == snap_len);
    struct record first = {{0}, 0, 0}, second = {{0}, 0, 0};
    EXPECT(FERRITE_OK, ferrite_resume(&s, 8, &sampler, record_token, &first, &generated));
    CHECK(generated == 8);
    uint64_t before = 0, after = 0;
    EXPECT(FERRITE_OK, ferrite_position(&s, &before));
    snap[snap_len / 2] ^= 0x10;
    EXPECT(FERRITE_E_BAD_SNAPSHOT, ferrite_restore(&s, snap, snap_len));
    EXPECT(FERRITE_OK, ferrite_position(&s, &after));
    CHECK(before == after); /* a refused snapshot leaves the session */
    snap[snap_len / 2] ^= 0x10;
    EXPECT(FERRITE_E_BAD_SNAPSHOT, ferrite_restore(&s, snap, snap_len - 1));
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_restore(&s, NULL, snap_len));
    EXPECT(FERRITE_OK, ferrite_restore(&s, snap, snap_len));
    EXPECT(FERRITE_OK, ferrite_resume(&s, 8, &sampler, record_token, &second, NULL));
    CHECK(memcmp(first.tokens, second.tokens, 8 * sizeof(uint32_t)) == 0);
    free(snap);
    free(buf);
}

static void test_update(const uint8_t *image, size_t len) {
    void *block;
    uint8_t *slot = copy_at(image, len, 0, &block); /* a 16-aligned slot of len bytes */
    memset(slot, 0, len);
    size_t got = 0;
    struct source src = {image, len, 0, 100, 0};
    EXPECT(FERRITE_OK, ferrite_update_receive(slot, len, 64, read_source, &src, &got));
    CHECK(got == len && memcmp(slot, image, len) == 0);

    src = (struct source){image, len, 0, 100, 0};
    EXPECT(FERRITE_E_UPDATE_TOO_LARGE,
           ferrite_update_receive(slot, len - 1, 64, read_source, &src, &got));
    src = (struct source){image, len / 2, 0, 100, 0};
    EXPECT(FERRITE_E_UPDATE_INTERRUPTED,
           ferrite_update_receive(slot, len, 64, read_source, &src, &got));
    src = (struct source){image, 10, 0, 100, 0};
    EXPECT(FERRITE_E_UPDATE_NO_HEADER,
           ferrite_update_receive(slot, len, 64, read_source, &src, &got));
    src = (struct source){image, len, 0, 100, 300};
    EXPECT(FERRITE_E_UPDATE_READ_ERROR,
           ferrite_update_receive(slot, len, 64, read_source, &src, &got));
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_update_receive(slot, len, 64, NULL, &src, &got));
    EXPECT(FERRITE_E_NULL_POINTER,
           ferrite_update_receive(NULL, len, 64, read_source, &src, &got));

    size_t bytes = 0;
    EXPECT(FERRITE_OK, ferrite_session_len(image, len, &bytes));
    ferrite_model model;
    memcpy(slot, image, len);
    EXPECT(FERRITE_OK, ferrite_update_validate(slot, len, bytes, &model));
    ferrite_info info;
    EXPECT(FERRITE_OK, ferrite_model_info(&model, &info));
    EXPECT(FERRITE_OK, ferrite_update_validate(slot, len, bytes, NULL));
    EXPECT(FERRITE_E_UPDATE_SESSION_TOO_LARGE, ferrite_update_validate(slot, len, bytes - 4, &model));
    slot[len / 2] ^= 0x40;
    EXPECT(FERRITE_E_CRC_MISMATCH, ferrite_update_validate(slot, len, bytes, &model));
    slot[len / 2] ^= 0x40;
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_update_validate(NULL, len, bytes, &model));

    /* This image is not signed: refused when signatures are required. */
    uint8_t keys[2][FERRITE_PUBLIC_KEY_LEN] = {{1}, {2}};
    EXPECT(FERRITE_E_UNSIGNED,
           ferrite_update_validate_signed(slot, len, bytes, keys, 2, 0, &model));
    EXPECT(FERRITE_E_NULL_POINTER,
           ferrite_update_validate_signed(slot, len, bytes, NULL, 2, 0, &model));
    free(block);
}

/* ferrite_select_memory on a model with cross layers of 2 baked memories:
 * memory 1's logits differ from memory 0's, an index past them is refused
 * with the session unchanged, a reset returns to memory 0. */
static void test_memories(const uint8_t *image, size_t len) {
    ferrite_model model;
    EXPECT(FERRITE_OK, ferrite_model_load(image, len, &model));
    size_t bytes = 0;
    EXPECT(FERRITE_OK, ferrite_session_len(image, len, &bytes));
    float *buf = malloc(bytes);
    ferrite_session s;
    EXPECT(FERRITE_OK, ferrite_session_init(&model, buf, bytes, &s));
    const float *logits = NULL;
    size_t n = 0;
    EXPECT(FERRITE_OK, ferrite_feed(&s, 'a', &logits, &n));
    float *first = malloc(n * sizeof *first);
    memcpy(first, logits, n * sizeof *first);
    EXPECT(FERRITE_OK, ferrite_reset(&s));
    EXPECT(FERRITE_OK, ferrite_select_memory(&s, 1));
    EXPECT(FERRITE_E_NO_SUCH_MEMORY, ferrite_select_memory(&s, 2));
    EXPECT(FERRITE_E_NO_SUCH_MEMORY, ferrite_select_memory(&s, UINT32_MAX));
    EXPECT(FERRITE_OK, ferrite_feed(&s, 'a', &logits, &n));
    CHECK(memcmp(first, logits, n * sizeof *first) != 0); /* memory 1 is still selected */
    EXPECT(FERRITE_OK, ferrite_reset(&s));
    EXPECT(FERRITE_OK, ferrite_feed(&s, 'a', &logits, &n));
    CHECK(memcmp(first, logits, n * sizeof *first) == 0); /* back to memory 0 */
    free(first);

    /* Caller-owned memories: sized by ferrite_memory_len, written by the
     * device encoder, fed token by token; generation with one equals the
     * same tokens fed with it (the default sampler is greedy). */
    size_t mem_bytes = 0;
    EXPECT(FERRITE_OK, ferrite_memory_len(image, len, 5, &mem_bytes));
    size_t words = mem_bytes / sizeof(float);
    CHECK(mem_bytes % sizeof(float) == 0 && words > 0);
    size_t one_slot = 0;
    EXPECT(FERRITE_OK, ferrite_memory_len(image, len, 1, &one_slot));
    CHECK(mem_bytes == 5 * one_slot); /* words grow with the slots, nothing else */
    EXPECT(FERRITE_E_BAD_MEMORY, ferrite_memory_len(image, len, 0, &mem_bytes));
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_memory_len(image, len, 5, NULL));
    EXPECT(FERRITE_E_TRUNCATED, ferrite_memory_len(image, 10, 5, &one_slot));
    float *mem = malloc(mem_bytes + sizeof(float));
    const uint32_t text[5] = {'k', 'e', 'y', '=', 'v'};
    EXPECT(FERRITE_OK, ferrite_feed(&s, 'z', NULL, NULL));
    EXPECT(FERRITE_OK, ferrite_encode_memory(&s, text, 5, mem, mem_bytes));
    uint64_t pos = 1;
    EXPECT(FERRITE_OK, ferrite_position(&s, &pos));
    CHECK(pos == 0); /* the encoder leaves a reset stream */
    for (size_t i = 0; i < words; i++) {
        CHECK(isfinite(mem[i]));
    }
    EXPECT(FERRITE_E_BAD_MEMORY, ferrite_encode_memory(&s, text, 4, mem, mem_bytes));
    EXPECT(FERRITE_E_BAD_MEMORY, ferrite_encode_memory(&s, text, 5, mem, mem_bytes - 4));
    EXPECT(FERRITE_E_BAD_MEMORY, ferrite_encode_memory(&s, text, 5, mem, mem_bytes + 2));
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_encode_memory(&s, NULL, 5, mem, mem_bytes));
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_encode_memory(NULL, text, 5, mem, mem_bytes));
    const uint32_t bad_text[5] = {'k', 'e', 'y', 256, 'v'};
    EXPECT(FERRITE_E_TOKEN_OUT_OF_RANGE, ferrite_encode_memory(&s, bad_text, 5, mem, mem_bytes));
    EXPECT(FERRITE_OK, ferrite_encode_memory(&s, text, 5, mem, mem_bytes));

    /* Fed with the caller memory: not the baked memory 0's logits, the same
     * again after a reset, and a memory of the wrong size refused with the
     * state unchanged. */
    EXPECT(FERRITE_OK, ferrite_feed(&s, 'a', &logits, &n));
    float *baked = malloc(n * sizeof *baked);
    memcpy(baked, logits, n * sizeof *baked);
    EXPECT(FERRITE_OK, ferrite_reset(&s));
    EXPECT(FERRITE_OK, ferrite_feed_with_memory(&s, 'a', mem, mem_bytes, 5, &logits, &n));
    float *with = malloc(n * sizeof *with);
    memcpy(with, logits, n * sizeof *with);
    CHECK(memcmp(baked, with, n * sizeof *with) != 0);
    EXPECT(FERRITE_E_BAD_MEMORY, ferrite_feed_with_memory(&s, 'b', mem, mem_bytes, 4, NULL, NULL));
    EXPECT(FERRITE_E_BAD_MEMORY, ferrite_feed_with_memory(&s, 'b', mem, mem_bytes - 4, 5, NULL, NULL));
    EXPECT(FERRITE_E_BAD_MEMORY, ferrite_feed_with_memory(&s, 'b', mem, mem_bytes + 2, 5, NULL, NULL));
    EXPECT(FERRITE_E_MISALIGNED,
           ferrite_feed_with_memory(&s, 'b', (const float *)((const uint8_t *)mem + 2), mem_bytes, 5, NULL, NULL));
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_feed_with_memory(&s, 'b', NULL, mem_bytes, 5, NULL, NULL));
    EXPECT(FERRITE_OK, ferrite_position(&s, &pos));
    CHECK(pos == 1);
    EXPECT(FERRITE_OK, ferrite_reset(&s));
    EXPECT(FERRITE_OK, ferrite_feed_with_memory(&s, 'a', mem, mem_bytes, 5, &logits, &n));
    CHECK(memcmp(with, logits, n * sizeof *with) == 0);

    /* Generation with the memory = the greedy loop fed with it. */
    ferrite_sampler sampler;
    EXPECT(FERRITE_OK, ferrite_sampler_init(&sampler, NULL));
    const uint32_t prompt[2] = {'a', 'b'};
    struct record got = {{0}, 0, 0};
    size_t generated = 0;
    EXPECT(FERRITE_OK, ferrite_reset(&s));
    EXPECT(FERRITE_OK, ferrite_generate_with_memory(&s, prompt, 2, 6, &sampler, mem, mem_bytes, 5,
                                                    record_token, &got, &generated));
    CHECK(generated == 6 && got.n == 6);
    EXPECT(FERRITE_OK, ferrite_reset(&s));
    uint32_t token = prompt[0];
    EXPECT(FERRITE_OK, ferrite_feed_with_memory(&s, token, mem, mem_bytes, 5, NULL, NULL));
    token = prompt[1];
    for (size_t i = 0; i < 6; i++) {
        EXPECT(FERRITE_OK, ferrite_feed_with_memory(&s, token, mem, mem_bytes, 5, &logits, &n));
        EXPECT(FERRITE_OK, ferrite_sample(&sampler, logits, n, &token));
        CHECK(i < got.n && token == got.tokens[i]);
    }
    EXPECT(FERRITE_E_BAD_MEMORY, ferrite_generate_with_memory(&s, prompt, 2, 6, &sampler, mem, mem_bytes, 4,
                                                              NULL, NULL, &generated));
    EXPECT(FERRITE_E_BAD_PROMPT, ferrite_generate_with_memory(&s, prompt, 0, 6, &sampler, mem, mem_bytes, 5,
                                                              NULL, NULL, &generated));

    /* f16 words: half the bytes, refused at the f32 size; each word the
     * f32 encoder's rounded to nearest (within half an f16 step), and the
     * logits those of an f32 memory holding the same values, bit for bit;
     * generation = the greedy loop fed with it. */
    size_t half_bytes = mem_bytes / 2;
    uint16_t *half = malloc(half_bytes + sizeof(uint16_t));
    EXPECT(FERRITE_OK, ferrite_encode_memory_f16(&s, text, 5, half, half_bytes));
    EXPECT(FERRITE_E_BAD_MEMORY, ferrite_encode_memory_f16(&s, text, 5, half, half_bytes + 1));
    EXPECT(FERRITE_E_BAD_MEMORY, ferrite_encode_memory_f16(&s, text, 4, half, half_bytes));
    EXPECT(FERRITE_E_MISALIGNED,
           ferrite_encode_memory_f16(&s, text, 5, (uint16_t *)((uint8_t *)half + 1), half_bytes));
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_encode_memory_f16(&s, text, 5, NULL, half_bytes));
    EXPECT(FERRITE_OK, ferrite_encode_memory_f16(&s, text, 5, half, half_bytes));
    float *widened = malloc(mem_bytes);
    size_t rounded = 0;
    for (size_t i = 0; i < words; i++) {
        widened[i] = half_to_float(half[i]);
        CHECK(fabsf(widened[i] - mem[i]) <= ldexpf(fabsf(mem[i]), -11) + ldexpf(1.0f, -25));
        rounded += widened[i] != mem[i];
    }
    CHECK(rounded > 0); /* f16 words, not f32 ones */
    EXPECT(FERRITE_E_BAD_MEMORY, ferrite_feed_with_memory_f16(&s, 'a', half, mem_bytes, 5, NULL, NULL));
    EXPECT(FERRITE_E_BAD_MEMORY, ferrite_feed_with_memory_f16(&s, 'a', half, half_bytes, 4, NULL, NULL));
    EXPECT(FERRITE_OK, ferrite_position(&s, &pos));
    CHECK(pos == 0); /* refused: nothing fed */
    EXPECT(FERRITE_OK, ferrite_feed_with_memory(&s, 'a', widened, mem_bytes, 5, &logits, &n));
    float *wide_logits = malloc(n * sizeof *wide_logits);
    memcpy(wide_logits, logits, n * sizeof *wide_logits);
    EXPECT(FERRITE_OK, ferrite_reset(&s));
    EXPECT(FERRITE_OK, ferrite_feed_with_memory_f16(&s, 'a', half, half_bytes, 5, &logits, &n));
    CHECK(memcmp(wide_logits, logits, n * sizeof *logits) == 0);
    free(wide_logits);
    free(widened);
    got.n = 0;
    EXPECT(FERRITE_OK, ferrite_reset(&s));
    EXPECT(FERRITE_OK, ferrite_generate_with_memory_f16(&s, prompt, 2, 6, &sampler, half, half_bytes, 5,
                                                        record_token, &got, &generated));
    CHECK(generated == 6 && got.n == 6);
    EXPECT(FERRITE_OK, ferrite_reset(&s));
    token = prompt[0];
    EXPECT(FERRITE_OK, ferrite_feed_with_memory_f16(&s, token, half, half_bytes, 5, NULL, NULL));
    token = prompt[1];
    for (size_t i = 0; i < 6; i++) {
        EXPECT(FERRITE_OK, ferrite_feed_with_memory_f16(&s, token, half, half_bytes, 5, &logits, &n));
        EXPECT(FERRITE_OK, ferrite_sample(&sampler, logits, n, &token));
        CHECK(i < got.n && token == got.tokens[i]);
    }
    EXPECT(FERRITE_E_BAD_MEMORY, ferrite_generate_with_memory_f16(&s, prompt, 2, 6, &sampler, half, mem_bytes,
                                                                  5, NULL, NULL, &generated));
    free(half);

    /* int8 words and a scale a row: a quarter of the word bytes plus 4 a
     * row; each row's scale its largest magnitude / 127 and each word
     * within half a step of the f32 encoder's; the logits those of an f32
     * memory of the dequantized values within the f32 step's rounding (the
     * step reads int8 as q * scale); generation = the greedy loop. */
    size_t rows = 0;
    EXPECT(FERRITE_OK, ferrite_memory_rows(image, len, 5, &rows));
    size_t one_rows = 0;
    EXPECT(FERRITE_OK, ferrite_memory_rows(image, len, 1, &one_rows));
    CHECK(rows == 5 * one_rows && rows % 2 == 0 && words % rows == 0);
    EXPECT(FERRITE_E_BAD_MEMORY, ferrite_memory_rows(image, len, 0, &rows));
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_memory_rows(image, len, 5, NULL));
    EXPECT(FERRITE_OK, ferrite_memory_rows(image, len, 5, &rows));
    size_t q_bytes = words, scale_bytes = rows * sizeof(float);
    int8_t *q8 = malloc(q_bytes);
    float *scales = malloc(scale_bytes + sizeof(float));
    EXPECT(FERRITE_OK, ferrite_encode_memory_i8(&s, text, 5, q8, q_bytes, scales, scale_bytes));
    EXPECT(FERRITE_E_BAD_MEMORY, ferrite_encode_memory_i8(&s, text, 5, q8, q_bytes - 1, scales, scale_bytes));
    EXPECT(FERRITE_E_BAD_MEMORY, ferrite_encode_memory_i8(&s, text, 5, q8, q_bytes, scales, scale_bytes - 4));
    EXPECT(FERRITE_E_BAD_MEMORY, ferrite_encode_memory_i8(&s, text, 5, q8, q_bytes, scales, scale_bytes + 2));
    EXPECT(FERRITE_E_NULL_POINTER, ferrite_encode_memory_i8(&s, text, 5, q8, q_bytes, NULL, scale_bytes));
    EXPECT(FERRITE_OK, ferrite_encode_memory_i8(&s, text, 5, q8, q_bytes, scales, scale_bytes));
    /* Every row of this image has the same width (words / rows). */
    size_t width = words / rows;
    float *dequant = malloc(mem_bytes);
    for (size_t r = 0; r < rows; r++) {
        float top = 0;
        for (size_t i = 0; i < width; i++) {
            top = fmaxf(top, fabsf(mem[r * width + i]));
        }
        CHECK(scales[r] == top / 127.0f);
        for (size_t i = 0; i < width; i++) {
            dequant[r * width + i] = (float)q8[r * width + i] * scales[r];
            CHECK(fabsf(dequant[r * width + i] - mem[r * width + i]) <= 0.5001f * scales[r]);
        }
    }
    EXPECT(FERRITE_E_BAD_MEMORY,
           ferrite_feed_with_memory_i8(&s, 'a', q8, q_bytes, scales, scale_bytes - 4, 5, NULL, NULL));
    EXPECT(FERRITE_E_BAD_MEMORY, ferrite_feed_with_memory_i8(&s, 'a', q8, q_bytes, scales, scale_bytes, 4, NULL, NULL));
    EXPECT(FERRITE_E_MISALIGNED, ferrite_feed_with_memory_i8(&s, 'a', q8, q_bytes,
                                                             (const float *)((const uint8_t *)scales + 2),
                                                             scale_bytes, 5, NULL, NULL));
    EXPECT(FERRITE_OK, ferrite_reset(&s));
    EXPECT(FERRITE_OK, ferrite_feed_with_memory(&s, 'a', dequant, mem_bytes, 5, &logits, &n));
    float *deq_logits = malloc(n * sizeof *deq_logits);
    memcpy(deq_logits, logits, n * sizeof *deq_logits);
    EXPECT(FERRITE_OK, ferrite_reset(&s));
    EXPECT(FERRITE_OK, ferrite_feed_with_memory_i8(&s, 'a', q8, q_bytes, scales, scale_bytes, 5, &logits, &n));
    double err = 0, norm = 0;
    for (size_t i = 0; i < n; i++) {
        err += ((double)logits[i] - deq_logits[i]) * ((double)logits[i] - deq_logits[i]);
        norm += (double)deq_logits[i] * deq_logits[i];
    }
    CHECK(err <= 1e-10 * norm); /* the same values, summed as the step sums them */
    got.n = 0;
    EXPECT(FERRITE_OK, ferrite_reset(&s));
    EXPECT(FERRITE_OK, ferrite_generate_with_memory_i8(&s, prompt, 2, 6, &sampler, q8, q_bytes, scales, scale_bytes,
                                                       5, record_token, &got, &generated));
    CHECK(generated == 6 && got.n == 6);
    EXPECT(FERRITE_OK, ferrite_reset(&s));
    token = prompt[0];
    EXPECT(FERRITE_OK, ferrite_feed_with_memory_i8(&s, token, q8, q_bytes, scales, scale_bytes, 5, NULL, NULL));
    token = prompt[1];
    for (size_t i = 0; i < 6; i++) {
        EXPECT(FERRITE_OK,
               ferrite_feed_with_memory_i8(&s, token, q8, q_bytes, scales, scale_bytes, 5, &logits, &n));
        EXPECT(FERRITE_OK, ferrite_sample(&sampler, logits, n, &token));
        CHECK(i < got.n && token == got.tokens[i]);
    }
    free(deq_logits);
    free(dequant);
    free(scales);
    free(q8);
    free(with);
    free(baked);
    free(mem);
    free(buf);
}

/* ferrite_encode_memory and the caller-memory calls on the first image (no
 * cross layer). */
static void test_no_cross_memory(const uint8_t *image, size_t len) {
    size_t bytes = 0;
    EXPECT(FERRITE_E_BAD_MEMORY, ferrite_memory_len(image, len, 4, &bytes));
    ferrite_model model;
    EXPECT(FERRITE_OK, ferrite_model_load(image, len, &model));
    EXPECT(FERRITE_OK, ferrite_session_len(image, len, &bytes));
    float *buf = malloc(bytes);
    ferrite_session s;
    EXPECT(FERRITE_OK, ferrite_session_init(&model, buf, bytes, &s));
    float mem[8] = {0};
    const uint32_t text[2] = {'a', 'b'};
    EXPECT(FERRITE_E_BAD_MEMORY, ferrite_encode_memory(&s, text, 2, mem, sizeof mem));
    EXPECT(FERRITE_E_BAD_MEMORY, ferrite_feed_with_memory(&s, 'a', mem, sizeof mem, 2, NULL, NULL));
    uint16_t half[8] = {0};
    EXPECT(FERRITE_E_BAD_MEMORY, ferrite_encode_memory_f16(&s, text, 2, half, sizeof half));
    EXPECT(FERRITE_E_BAD_MEMORY, ferrite_feed_with_memory_f16(&s, 'a', half, sizeof half, 2, NULL, NULL));
    EXPECT(FERRITE_E_BAD_MEMORY, ferrite_memory_rows(image, len, 2, &bytes));
    int8_t q8[8] = {0};
    EXPECT(FERRITE_E_BAD_MEMORY, ferrite_encode_memory_i8(&s, text, 2, q8, sizeof q8, mem, sizeof mem));
    EXPECT(FERRITE_E_BAD_MEMORY, ferrite_feed_with_memory_i8(&s, 'a', q8, sizeof q8, mem, sizeof mem, 2, NULL, NULL));
    free(buf);
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: %s IMAGE.fer [CROSS_IMAGE.fer]\n", argv[0]);
        return 2;
    }
    size_t len = 0;
    uint8_t *file = read_file(argv[1], &len);
    void *block;
    const uint8_t *image = copy_at(file, len, 0, &block);
    test_codes();
    test_image_checks(image, len);
    test_session(image, len);
    test_update(image, len);
    test_no_cross_memory(image, len);
    free(block);
    free(file);
    if (argc == 3) {
        uint8_t *cross_file = read_file(argv[2], &len);
        const uint8_t *cross = copy_at(cross_file, len, 0, &block);
        test_memories(cross, len);
        free(block);
        free(cross_file);
    }
    printf("test_capi: %d checks, %d failed\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
