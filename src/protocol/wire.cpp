#include "protocol/wire.h"

namespace skippy::protocol::wire {

std::string num(uint64_t v) { return std::to_string(v); }
std::string num_signed(int64_t v) { return std::to_string(v); }

std::string hex16(uint16_t v) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out(4, '0');
    for (int i = 0; i < 4; ++i) out[3 - i] = digits[(v >> (4 * i)) & 0xf];
    return out;
}

status bad_field(std::string_view message, std::string_view field, size_t offset, std::string_view detail) {
    std::string text;
    text.reserve(message.size() + field.size() + detail.size() + 32);
    text.append(message).append(" field ").append(field);
    text.append(" (byte ").append(num(offset)).append("): ").append(detail);
    return make_error(error_code::invalid_data, std::move(text));
}

status field_reader::need(std::string_view field, uint64_t n) const {
    const size_t left = reader_.remaining();
    if (n <= left) return status::ok();
    return bad_field(message_, field, reader_.offset(),
                     "truncated: needs " + num(n) + " bytes, " + num(left) + " left");
}

status field_reader::expect_end() const {
    if (reader_.remaining() == 0) return status::ok();
    return bad_field(message_, "end", reader_.offset(), num(reader_.remaining()) + " trailing bytes after the last section");
}

result<uint16_t> check_frame(std::span<const uint8_t> frame, const protocol_limits & limits, std::string_view message) {
    field_reader r(frame, message);
    uint32_t frame_bytes = 0;
    uint16_t kind = 0;
    SKIPPY_TRY(r.u32("frame_bytes", frame_bytes));
    SKIPPY_TRY(r.u16("kind", kind));
    if (frame_bytes != frame.size()) {
        return bad_field(message, "frame_bytes", 0,
                         "says " + num(frame_bytes) + " bytes but the frame has " + num(frame.size()));
    }
    if (frame_bytes < min_frame_bytes) {
        return bad_field(message, "frame_bytes", 0, num(frame_bytes) + " is below the minimum frame of " + num(min_frame_bytes));
    }
    if (frame_bytes > limits.max_frame_bytes) {
        return bad_field(message, "frame_bytes", 0,
                         num(frame_bytes) + " exceeds max_frame_bytes " + num(limits.max_frame_bytes));
    }
    return kind;
}

void put_stats(byte_writer & w, const stats_block & s) {
    for (const stat_descriptor & d : stat_descriptors) {
        const uint64_t v = stat_value(s, d.id);
        if (d.wire_bytes == 8) {
            w.put_u64(v);
        } else {
            w.put_u32(static_cast<uint32_t>(v));  // 4-byte stats are uint32_t fields
        }
    }
}

status get_stats(field_reader & r, stats_block & s) {
    for (const stat_descriptor & d : stat_descriptors) {
        uint64_t v = 0;
        if (d.wire_bytes == 8) {
            SKIPPY_TRY(r.u64(d.name, v));
        } else {
            uint32_t v32 = 0;
            SKIPPY_TRY(r.u32(d.name, v32));
            v = v32;
        }
        set_stat(s, d.id, v);
    }
    return status::ok();
}

namespace {

// Length of the well-formed UTF-8 sequence at the start of s (Unicode 15, table
// 3-7), or 0 when it is ill-formed or cut short.
size_t utf8_sequence_bytes(std::string_view s) {
    const auto b = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
    const auto in = [](uint8_t v, uint8_t lo, uint8_t hi) { return v >= lo && v <= hi; };
    const uint8_t c = b(0);
    if (c <= 0x7f) return 1;
    size_t len = 0;
    uint8_t lo = 0x80, hi = 0xbf;  // range of the second byte
    if (in(c, 0xc2, 0xdf)) {
        len = 2;
    } else if (in(c, 0xe0, 0xef)) {
        len = 3;
        if (c == 0xe0) lo = 0xa0;       // no overlong forms
        else if (c == 0xed) hi = 0x9f;  // no surrogates
    } else if (in(c, 0xf0, 0xf4)) {
        len = 4;
        if (c == 0xf0) lo = 0x90;       // no overlong forms
        else if (c == 0xf4) hi = 0x8f;  // nothing above U+10FFFF
    } else {
        return 0;
    }
    if (s.size() < len) return 0;
    if (!in(b(1), lo, hi)) return 0;
    for (size_t i = 2; i < len; ++i) {
        if (!in(b(i), 0x80, 0xbf)) return 0;
    }
    return len;
}

}  // namespace

bool is_valid_utf8(std::string_view bytes) {
    while (!bytes.empty()) {
        const size_t n = utf8_sequence_bytes(bytes);
        if (n == 0) return false;
        bytes.remove_prefix(n);
    }
    return true;
}

std::string sanitize_utf8(std::string_view bytes, size_t max_bytes) {
    static constexpr std::string_view replacement = "\xef\xbf\xbd";
    std::string out;
    out.reserve(std::min(bytes.size(), max_bytes));
    while (!bytes.empty()) {
        const size_t n = utf8_sequence_bytes(bytes);
        const std::string_view piece = n == 0 ? replacement : bytes.substr(0, n);
        if (out.size() + piece.size() > max_bytes) break;
        out.append(piece);
        bytes.remove_prefix(n == 0 ? 1 : n);
    }
    return out;
}

}  // namespace skippy::protocol::wire
