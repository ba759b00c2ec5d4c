/* The model image in flash, 16-byte aligned as the runtime needs: the
 * assembler's .incbin of the file the build names (MODEL_PATH). In C it is
 * `extern const uint8_t model_fer[], model_fer_end[];`. */
    .section .rodata.ferrite_model, "a"
    .balign 16
    .global model_fer
model_fer:
    .incbin MODEL_PATH
    .global model_fer_end
model_fer_end:
