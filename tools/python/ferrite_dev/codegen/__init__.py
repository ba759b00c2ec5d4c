"""Tables generated into source files: ``unicode`` (runtime/src/tokenizer/unicode.rs)
and ``kinds`` (ferrite_ref/kinds.py, from the runtime's mixer table)."""
