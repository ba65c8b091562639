// The activation section of a request: descriptor, then token-major values in f32,
// f16 or bf16. f16/bf16 go on the wire only when they lose nothing (DESIGN §4), so
// the receiver always computes on exactly the values the sender produced.
#include "base/fp16.h"
#include "protocol/protocol.h"
#include "protocol/wire.h"

#include <cassert>
#include <string>
#include <string_view>

namespace skippy::protocol {

namespace {

bool f32_bits_finite(uint32_t bits) { return (bits & 0x7f800000u) != 0x7f800000u; }

}  // namespace

activation_dtype choose_activation_dtype(std::span<const float> values, activation_dtype preferred) {
    switch (preferred) {
        case activation_dtype::f32:
            return activation_dtype::f32;
        case activation_dtype::f16:
            for (float v : values) {
                if (float_to_bits(f16_to_f32(f32_to_f16(v))) != float_to_bits(v)) return activation_dtype::f32;
            }
            return activation_dtype::f16;
        case activation_dtype::bf16:
            for (float v : values) {
                if (float_to_bits(bf16_to_f32(f32_to_bf16(v))) != float_to_bits(v)) return activation_dtype::f32;
            }
            return activation_dtype::bf16;
    }
    return activation_dtype::f32;
}

namespace wire {

size_t activation_elem_bytes(activation_dtype dtype) { return dtype == activation_dtype::f32 ? 4 : 2; }

void put_activation(std::vector<uint8_t> & out, const activation_frame & a, uint32_t n_rows, activation_dtype wire_dtype) {
    assert(a.values.size() == static_cast<size_t>(n_rows) * a.n_embd);
    byte_writer w(out);
    w.put_u8(static_cast<uint8_t>(wire_dtype));
    w.put_zeros(3);
    w.put_u32(a.producer_stage);
    w.put_u32(a.layer_start);
    w.put_u32(a.layer_end);
    w.put_u32(n_rows);
    w.put_u32(a.n_embd);
    // The values are the bulk of a frame (up to hundreds of MiB): size the buffer once
    // and store each little-endian value in place rather than appending byte by byte.
    const size_t at = out.size();
    out.resize(at + a.values.size() * activation_elem_bytes(wire_dtype));
    uint8_t * p = out.data() + at;
    switch (wire_dtype) {
        case activation_dtype::f32:
            for (size_t i = 0; i < a.values.size(); ++i) store_u32_le(p + 4 * i, float_to_bits(a.values[i]));
            break;
        case activation_dtype::f16:
            for (size_t i = 0; i < a.values.size(); ++i) store_u16_le(p + 2 * i, f32_to_f16(a.values[i]));
            break;
        case activation_dtype::bf16:
            for (size_t i = 0; i < a.values.size(); ++i) store_u16_le(p + 2 * i, f32_to_bf16(a.values[i]));
            break;
    }
}

status get_activation(field_reader & r, uint32_t n_rows, std::string_view rows_rule, const protocol_limits & limits,
                      activation_frame & a) {
    uint8_t dtype = 0;
    const size_t dtype_at = r.offset();
    SKIPPY_TRY(r.u8("activation.dtype", dtype));
    if (dtype > static_cast<uint8_t>(activation_dtype::bf16)) {
        return r.fail("activation.dtype", dtype_at, "unknown dtype " + num(dtype));
    }
    a.dtype = static_cast<activation_dtype>(dtype);
    for (int i = 0; i < 3; ++i) {
        uint8_t reserved = 0;
        const size_t at = r.offset();
        SKIPPY_TRY(r.u8("activation.reserved", reserved));
        if (reserved != 0) return r.fail("activation.reserved", at, "must be 0, is " + num(reserved));
    }
    SKIPPY_TRY(r.u32("activation.producer_stage", a.producer_stage));
    SKIPPY_TRY(r.u32("activation.layer_start", a.layer_start));
    const size_t end_at = r.offset();
    SKIPPY_TRY(r.u32("activation.layer_end", a.layer_end));
    if (a.layer_end < a.layer_start) {
        return r.fail("activation.layer_end", end_at,
                      num(a.layer_end) + " is below layer_start " + num(a.layer_start));
    }
    uint32_t wire_rows = 0;
    const size_t rows_at = r.offset();
    SKIPPY_TRY(r.u32("activation.n_tokens", wire_rows));
    if (wire_rows != n_rows) {
        return r.fail("activation.n_tokens", rows_at,
                      num(wire_rows) + " differs from the request's " + num(n_rows) + " rows (" +
                          std::string(rows_rule) + ")");
    }
    const size_t embd_at = r.offset();
    SKIPPY_TRY(r.u32("activation.n_embd", a.n_embd));
    if (a.n_embd == 0 || a.n_embd > limits.max_embd) {
        return r.fail("activation.n_embd", embd_at,
                      num(a.n_embd) + " is outside [1, max_embd " + num(limits.max_embd) + "]");
    }
    // Both factors are below 2^32, so the product of three fits in 64 bits; it is
    // compared with what the frame holds before anything is allocated.
    const uint64_t n_values = static_cast<uint64_t>(n_rows) * a.n_embd;
    const uint64_t n_bytes = n_values * activation_elem_bytes(a.dtype);
    const size_t data_at = r.offset();
    if (n_bytes != r.remaining()) {
        return r.fail("activation.values", data_at,
                      "n_tokens " + num(n_rows) + " x n_embd " + num(a.n_embd) + " x " +
                          num(activation_elem_bytes(a.dtype)) + " bytes = " + num(n_bytes) + ", but " +
                          num(r.remaining()) + " bytes follow");
    }
    std::span<const uint8_t> data;
    SKIPPY_TRY(r.bytes("activation.values", static_cast<size_t>(n_bytes), data));
    a.values.resize(static_cast<size_t>(n_values));
    const uint8_t * p = data.data();
    size_t bad = a.values.size();  // index of the first non-finite value
    switch (a.dtype) {
        case activation_dtype::f32:
            for (size_t i = 0; i < a.values.size(); ++i) {
                const uint32_t bits = load_u32_le(p + 4 * i);
                if (!f32_bits_finite(bits) && bad == a.values.size()) bad = i;
                a.values[i] = bits_to_float(bits);
            }
            break;
        case activation_dtype::f16:
            for (size_t i = 0; i < a.values.size(); ++i) {
                const uint16_t h = load_u16_le(p + 2 * i);
                if ((h & 0x7c00u) == 0x7c00u && bad == a.values.size()) bad = i;
                a.values[i] = f16_to_f32(h);
            }
            break;
        case activation_dtype::bf16:
            for (size_t i = 0; i < a.values.size(); ++i) {
                const uint16_t b = load_u16_le(p + 2 * i);
                if ((b & 0x7f80u) == 0x7f80u && bad == a.values.size()) bad = i;
                a.values[i] = bf16_to_f32(b);
            }
            break;
    }
    if (bad != a.values.size()) {
        // Non-finite hidden states mean the sender's computation broke; refusing them
        // here fails the request where it went wrong instead of sampling garbage.
        return r.fail("activation.values", data_at + bad * activation_elem_bytes(a.dtype),
                      "value " + num(bad) + " (token " + num(bad / a.n_embd) + ", dim " + num(bad % a.n_embd) +
                          ") is not finite");
    }
    return status::ok();
}

}  // namespace wire
}  // namespace skippy::protocol
