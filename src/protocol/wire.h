// Internal helpers shared by the protocol's encoders and decoders.
#pragma once

#include "base/byte_io.h"
#include "base/status.h"
#include "protocol/protocol.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace skippy::protocol::wire {

// The invalid_data status every decoder returns for a bad field:
// "<message> field <field> (byte <offset>): <detail>".
status bad_field(std::string_view message, std::string_view field, size_t offset, std::string_view detail);

// A byte_reader that names what it reads, so that running out of bytes is reported as
// "request field pos_start (byte 24): truncated, needs 8 bytes, 3 left".
class field_reader {
public:
    field_reader(std::span<const uint8_t> data, std::string_view message) : reader_(data), message_(message) {}

    size_t offset() const { return reader_.offset(); }
    size_t remaining() const { return reader_.remaining(); }
    std::string_view message() const { return message_; }

    status u8(std::string_view field, uint8_t & v)   { return get(field, 1, [&] { return reader_.get_u8(v); }); }
    status u16(std::string_view field, uint16_t & v) { return get(field, 2, [&] { return reader_.get_u16(v); }); }
    status u32(std::string_view field, uint32_t & v) { return get(field, 4, [&] { return reader_.get_u32(v); }); }
    status u64(std::string_view field, uint64_t & v) { return get(field, 8, [&] { return reader_.get_u64(v); }); }
    status i32(std::string_view field, int32_t & v)  { return get(field, 4, [&] { return reader_.get_i32(v); }); }
    status i64(std::string_view field, int64_t & v)  { return get(field, 8, [&] { return reader_.get_i64(v); }); }
    status f32(std::string_view field, float & v)    { return get(field, 4, [&] { return reader_.get_f32(v); }); }
    // A view of the next n bytes; n is checked against what is left before anything is
    // read, so a lying count costs nothing.
    status bytes(std::string_view field, size_t n, std::span<const uint8_t> & v) {
        return get(field, n, [&] { return reader_.get_span(n, v); });
    }

    status skip(std::string_view field, size_t n) { return get(field, n, [&] { return reader_.skip(n); }); }
    // Requires that n bytes are left (for a count about to size an allocation).
    status need(std::string_view field, uint64_t n) const;
    // invalid_data for `field` at `offset` (default: the current offset).
    status fail(std::string_view field, size_t offset, std::string_view detail) const {
        return bad_field(message_, field, offset, detail);
    }
    // Requires the reader to be at the end of its data.
    status expect_end() const;

private:
    template <typename F>
    status get(std::string_view field, uint64_t n, F && read) {
        const size_t at = reader_.offset();
        SKIPPY_TRY(need(field, n));
        if (!read()) return bad_field(message_, field, at, "truncated");  // unreachable after need()
        return status::ok();
    }

    byte_reader              reader_;
    std::string_view         message_;
};

// The frame checks every decoder starts with: the span holds at least a header, the
// length field equals its size and is within limits. Returns the kind number.
result<uint16_t> check_frame(std::span<const uint8_t> frame, const protocol_limits & limits, std::string_view message);

void put_stats(byte_writer & w, const stats_block & s);
status get_stats(field_reader & r, stats_block & s);

// True when `bytes` is well-formed UTF-8 (no overlong forms, surrogates or values
// above U+10FFFF).
bool is_valid_utf8(std::string_view bytes);
// `bytes` with each ill-formed sequence replaced by U+FFFD, cut at a character
// boundary to at most max_bytes (max_bytes >= 3 keeps room for one replacement).
std::string sanitize_utf8(std::string_view bytes, size_t max_bytes);

// A token id / count rendered for error messages.
std::string num(uint64_t v);
std::string num_signed(int64_t v);
// Four lowercase hex digits.
std::string hex16(uint16_t v);

}  // namespace skippy::protocol::wire

// ---------------------------------------------------------------------------------
// Activation section (activation.cpp)

namespace skippy::protocol::wire {

// Bytes of the activation descriptor before its values.
inline constexpr size_t activation_header_bytes = 24;

size_t activation_elem_bytes(activation_dtype dtype);
// Appends the section with values converted to `wire_dtype` (the result of
// choose_activation_dtype). n_rows is the request's activation_rows().
// REQUIRES: a.values.size() == n_rows * a.n_embd.
void put_activation(std::vector<uint8_t> & out, const activation_frame & a, uint32_t n_rows, activation_dtype wire_dtype);
// Reads the section, which must run to the end of the frame and hold n_rows rows (the
// request's activation_rows(); rows_rule says why, for the error message).
status get_activation(field_reader & r, uint32_t n_rows, std::string_view rows_rule, const protocol_limits & limits,
                      activation_frame & a);

}  // namespace skippy::protocol::wire
