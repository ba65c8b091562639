// UTF-8 helpers and the GPT-2 byte alphabet, internal to the tokenizer part.
#pragma once

#include "base/escape.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace skippy::tokenizer_detail {

// Bytes of the UTF-8 sequence that `lead` announces, counted from its high nibble the
// way llama.cpp counts it: 1 for ASCII, continuation bytes and 0xF8..0xFF, 2 for
// 0xC0..0xDF, 3 for 0xE0..0xEF, 4 for 0xF0..0xF7. No validation: SPM splits raw input
// into "characters" with this, and byte fallback then keeps every byte.
size_t utf8_lead_length(uint8_t lead);

// decode_utf8 (well-formed sequences only) is base/escape.h's, shared with the messages
// that quote file contents.
using skippy::decode_utf8;

// Appends the UTF-8 encoding of `cpt`. REQUIRES: cpt <= 0x10FFFF.
void append_utf8(std::string & out, uint32_t cpt);

// True when every byte of `text` belongs to a well-formed UTF-8 sequence.
bool is_valid_utf8(std::string_view text);

// GPT-2's reversible byte alphabet: each byte maps to one printable code point (bytes
// 0x21..0x7E, 0xA1..0xAC and 0xAE..0xFF to themselves, the other 68 to U+0100.. in byte
// order), so byte-level BPE tokens are printable strings. Returns that code point's
// UTF-8 encoding.
std::string_view gpt2_byte_to_utf8(uint8_t byte);

// The byte a GPT-2 alphabet code point stands for, or -1 when `cpt` is not in it.
int gpt2_cpt_to_byte(uint32_t cpt);

// Maps the GPT-2 alphabet characters of `text` back to bytes. Characters outside the
// alphabet (and ill-formed bytes) are copied unchanged, so no input is lost.
std::string gpt2_decode(std::string_view text);

}  // namespace skippy::tokenizer_detail
