#include "http/text_stream.h"

#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cassert>

namespace skippy::http {

size_t incomplete_utf8_tail(std::string_view s) {
    const size_t n = s.size();
    for (size_t i = 1; i <= std::min<size_t>(3, n); ++i) {
        const auto c = static_cast<unsigned char>(s[n - i]);
        if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
        size_t need = 0;
        if ((c & 0xE0) == 0xC0) need = 2;
        else if ((c & 0xF0) == 0xE0) need = 3;
        else if ((c & 0xF8) == 0xF0) need = 4;
        return need > i ? i : 0;  // ASCII, invalid lead or a complete sequence: nothing to hold
    }
    return 0;
}

stop_text_stream::stop_text_stream(std::vector<std::string> stop_strings) : stops_(std::move(stop_strings)) {
    for (const auto & s : stops_) {
        assert(!s.empty() && "stop strings are validated non-empty");
        max_stop_bytes_ = std::max(max_stop_bytes_, s.size());
    }
}

std::string stop_text_stream::release(size_t n_bytes) {
    std::string out = sanitize_utf8(std::string_view(pending_).substr(0, n_bytes));
    pending_.erase(0, n_bytes);
    released_ += out;
    return out;
}

std::string stop_text_stream::push(std::string_view bytes) {
    if (stopped_) return "";
    // pending_ held no whole stop string before, so a match must end in the new bytes.
    const size_t search_from = max_stop_bytes_ > 0 && pending_.size() >= max_stop_bytes_ - 1
                                   ? pending_.size() - (max_stop_bytes_ - 1)
                                   : 0;
    pending_.append(bytes);

    size_t earliest = std::string::npos;
    for (const auto & s : stops_) {
        const size_t pos = pending_.find(s, search_from);
        if (pos < earliest) {
            earliest = pos;
            matched_ = s;
        }
    }
    if (earliest != std::string::npos) {
        std::string out = release(earliest);
        pending_.clear();
        stopped_ = true;
        return out;
    }

    // The longest tail that could still grow into a stop string.
    size_t hold = 0;
    for (const auto & s : stops_) {
        for (size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k) {
            if (std::string_view(pending_).substr(pending_.size() - k) == std::string_view(s).substr(0, k)) {
                hold = k;
                break;
            }
        }
    }
    hold = std::max(hold, incomplete_utf8_tail(pending_));
    return release(pending_.size() - hold);
}

std::string stop_text_stream::finish() {
    if (stopped_) return "";
    return release(pending_.size());
}

}  // namespace skippy::http
