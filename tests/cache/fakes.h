// Test fakes for the cache: a tiny KV backend and an event sink.
//
// fake_kv_backend is a pool of n_blocks blocks of block_tokens positions (default: 4
// positions, five blocks). Instead of K/V rows a position holds one number, the
// "KV" a forward would write: kv(p) = mix(kv(p - 1), token(p)), so it depends on the
// whole prefix the way real KV does, and a restore is exact iff the numbers match a
// fresh compute.
//
//   block:     b0           b1           b2  b3  b4
//   session 0: [k0 k1 k2 k3][k4 k5 .  .]                 n_tokens 6
//   refcount:   1            1           0   0   0
//
// Refcounts are checked: a retain or release of a free block is recorded as a
// violation (tests assert there are none) instead of corrupting the state.
#pragma once

#include "cache/kv_backend.h"
#include "telemetry/telemetry.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace skippy::cache::testing {

inline uint64_t mix_kv(uint64_t prev, int32_t token) {
    uint64_t x = prev ^ (static_cast<uint64_t>(static_cast<uint32_t>(token)) + 0x9e3779b97f4a7c15ull);
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 31;
    return x;
}

// The KV numbers a fresh compute of `tokens` produces.
inline std::vector<uint64_t> expected_kv(const std::vector<int32_t> & tokens) {
    std::vector<uint64_t> out;
    uint64_t prev = 0;
    for (int32_t t : tokens) out.push_back(prev = mix_kv(prev, t));
    return out;
}

class fake_kv_backend final : public kv_backend_i {
public:
    explicit fake_kv_backend(int32_t n_blocks = 5, int32_t block_tokens = 4, int32_t n_sessions = 2)
        : bt_(block_tokens), values_(static_cast<size_t>(n_blocks), std::vector<uint64_t>(static_cast<size_t>(block_tokens))),
          refs_(static_cast<size_t>(n_blocks), 0), sessions_(static_cast<size_t>(n_sessions)) {}

    // A forward: writes positions [pos_start, pos_start + tokens.size()) of the session
    // (copying a shared block first). unavailable when the pool is exhausted.
    status compute(int32_t session, int64_t pos_start, std::span<const int32_t> tokens) {
        std::lock_guard<std::mutex> lock(mu_);
        seq & s = sessions_.at(static_cast<size_t>(session));
        if (pos_start > s.n_tokens) return make_error(error_code::invalid_argument, "gap");
        truncate_locked(s, pos_start);
        const int64_t end = pos_start + static_cast<int64_t>(tokens.size());
        if (!tokens.empty() && pos_start % bt_ != 0 && refs_[idx(s.blocks.back())] > 1) {
            int32_t copy = alloc_locked();
            if (copy < 0) return make_error(error_code::unavailable, "fake pool exhausted");
            values_[idx(copy)] = values_[idx(s.blocks.back())];
            unref_locked(s.blocks.back());
            s.blocks.back() = copy;
        }
        const size_t had = s.blocks.size();
        while (static_cast<int64_t>(s.blocks.size()) * bt_ < end) {
            int32_t b = alloc_locked();
            if (b < 0) {
                while (s.blocks.size() > had) { unref_locked(s.blocks.back()); s.blocks.pop_back(); }
                return make_error(error_code::unavailable, "fake pool exhausted");
            }
            s.blocks.push_back(b);
        }
        uint64_t prev = pos_start > 0 ? at(s, pos_start - 1) : 0;
        for (int64_t p = pos_start; p < end; ++p) at(s, p) = prev = mix_kv(prev, tokens[static_cast<size_t>(p - pos_start)]);
        s.n_tokens = end;
        return status::ok();
    }

    std::vector<uint64_t> kv_of(int32_t session) const {
        std::lock_guard<std::mutex> lock(mu_);
        const seq & s = sessions_.at(static_cast<size_t>(session));
        std::vector<uint64_t> out;
        for (int64_t p = 0; p < s.n_tokens; ++p) out.push_back(values_[idx(s.blocks[static_cast<size_t>(p / bt_)])][static_cast<size_t>(p % bt_)]);
        return out;
    }
    std::vector<kv_block_id> blocks_of(int32_t session) const {
        std::lock_guard<std::mutex> lock(mu_);
        return sessions_.at(static_cast<size_t>(session)).blocks;
    }
    int32_t refcount(kv_block_id b) const {
        std::lock_guard<std::mutex> lock(mu_);
        return refs_[idx(b)];
    }
    int64_t violations() const {
        std::lock_guard<std::mutex> lock(mu_);
        return violations_;
    }
    // Sum of refcounts: every reference anyone holds.
    int64_t total_refs() const {
        std::lock_guard<std::mutex> lock(mu_);
        int64_t n = 0;
        for (int32_t r : refs_) n += r;
        return n;
    }
    // The next import fails with this code (once).
    void fail_next_import(error_code code) {
        std::lock_guard<std::mutex> lock(mu_);
        fail_import_ = code;
    }
    int64_t n_imports() const {
        std::lock_guard<std::mutex> lock(mu_);
        return n_imports_;
    }

    // kv_backend_i
    int32_t block_tokens() const override { return bt_; }
    int64_t n_free_blocks() const override {
        std::lock_guard<std::mutex> lock(mu_);
        int64_t n = 0;
        for (int32_t r : refs_) n += r == 0;
        return n;
    }
    int64_t bytes_per_token() const override { return 8; }
    result<int64_t> session_tokens(int32_t session) const override {
        std::lock_guard<std::mutex> lock(mu_);
        if (!valid(session)) return make_error(error_code::invalid_argument, "unknown session");
        return sessions_[static_cast<size_t>(session)].n_tokens;
    }
    result<std::vector<kv_block_id>> session_blocks(int32_t session, int64_t n_tokens) const override {
        std::lock_guard<std::mutex> lock(mu_);
        if (!valid(session) || n_tokens > sessions_[static_cast<size_t>(session)].n_tokens) {
            return make_error(error_code::invalid_argument, "session does not hold the tokens");
        }
        const auto & b = sessions_[static_cast<size_t>(session)].blocks;
        return std::vector<kv_block_id>(b.begin(), b.begin() + (n_tokens + bt_ - 1) / bt_);
    }
    result<int64_t> blocks_needed(int32_t session, int64_t pos_start, int64_t n_tokens) const override {
        std::lock_guard<std::mutex> lock(mu_);
        if (!valid(session)) return make_error(error_code::invalid_argument, "unknown session");
        const seq & s = sessions_[static_cast<size_t>(session)];
        if (n_tokens == 0) return int64_t{0};
        const int64_t kept = (pos_start + bt_ - 1) / bt_;
        int64_t needed = (pos_start + n_tokens + bt_ - 1) / bt_ - kept;
        if (pos_start % bt_ != 0 && refs_[idx(s.blocks[static_cast<size_t>(pos_start / bt_)])] > 1) ++needed;
        return needed;
    }
    void retain(std::span<const kv_block_id> blocks) override {
        std::lock_guard<std::mutex> lock(mu_);
        for (kv_block_id b : blocks) {
            if (refs_[idx(b)] <= 0) ++violations_;
            else ++refs_[idx(b)];
        }
    }
    void release(std::span<const kv_block_id> blocks) override {
        std::lock_guard<std::mutex> lock(mu_);
        for (kv_block_id b : blocks) unref_locked(b);
    }
    status share_into(int32_t session, std::span<const kv_block_id> blocks, int64_t n_tokens) override {
        std::lock_guard<std::mutex> lock(mu_);
        if (!valid(session) || static_cast<int64_t>(blocks.size()) != (n_tokens + bt_ - 1) / bt_) {
            return make_error(error_code::invalid_argument, "bad share");
        }
        for (kv_block_id b : blocks) ++refs_[idx(b)];
        seq & s = sessions_[static_cast<size_t>(session)];
        truncate_locked(s, 0);
        s.blocks.assign(blocks.begin(), blocks.end());
        s.n_tokens = n_tokens;
        return status::ok();
    }
    status truncate_session(int32_t session, int64_t n_tokens) override {
        std::lock_guard<std::mutex> lock(mu_);
        if (!valid(session)) return make_error(error_code::invalid_argument, "unknown session");
        truncate_locked(sessions_[static_cast<size_t>(session)], n_tokens);
        return status::ok();
    }
    // Page: "FK" start count values... checksum(sum of values + start + count).
    result<std::vector<uint8_t>> export_page(std::span<const kv_block_id> blocks, int64_t n_tokens, int64_t token_start,
                                             int64_t token_count) const override {
        std::lock_guard<std::mutex> lock(mu_);
        if (token_start + token_count > n_tokens) return make_error(error_code::invalid_argument, "range");
        std::vector<uint64_t> words{0x4b46, static_cast<uint64_t>(token_start), static_cast<uint64_t>(token_count)};
        for (int64_t p = token_start; p < token_start + token_count; ++p) {
            words.push_back(values_[idx(blocks[static_cast<size_t>(p / bt_)])][static_cast<size_t>(p % bt_)]);
        }
        uint64_t sum = 0;
        for (uint64_t w : words) sum = sum * 31 + w;
        words.push_back(sum);
        std::vector<uint8_t> out(words.size() * 8);
        std::memcpy(out.data(), words.data(), out.size());
        return out;
    }
    status import_page(int32_t session, std::span<const uint8_t> page) override {
        std::lock_guard<std::mutex> lock(mu_);
        ++n_imports_;
        if (fail_import_) {
            error_code c = *fail_import_;
            fail_import_.reset();
            return make_error(c, "injected import failure");
        }
        if (page.size() % 8 != 0 || page.size() < 32) return make_error(error_code::invalid_data, "fake page size");
        std::vector<uint64_t> w(page.size() / 8);
        std::memcpy(w.data(), page.data(), page.size());
        uint64_t sum = 0;
        for (size_t i = 0; i + 1 < w.size(); ++i) sum = sum * 31 + w[i];
        if (w[0] != 0x4b46 || sum != w.back()) return make_error(error_code::integrity, "fake page checksum");
        const int64_t start = static_cast<int64_t>(w[1]), count = static_cast<int64_t>(w[2]);
        if (static_cast<int64_t>(w.size()) != count + 4) return make_error(error_code::invalid_data, "fake page count");
        seq & s = sessions_.at(static_cast<size_t>(session));
        if (s.n_tokens != start) return make_error(error_code::invalid_argument, "fake import position");
        const size_t had = s.blocks.size();
        if (start % bt_ != 0 && count > 0 && refs_[idx(s.blocks.back())] > 1) return make_error(error_code::internal, "fake: shared tail");
        while (static_cast<int64_t>(s.blocks.size()) * bt_ < start + count) {
            int32_t b = alloc_locked();
            if (b < 0) {
                while (s.blocks.size() > had) { unref_locked(s.blocks.back()); s.blocks.pop_back(); }
                return make_error(error_code::unavailable, "fake pool exhausted");
            }
            s.blocks.push_back(b);
        }
        for (int64_t i = 0; i < count; ++i) at(s, start + i) = w[static_cast<size_t>(3 + i)];
        s.n_tokens = start + count;
        return status::ok();
    }

private:
    struct seq {
        std::vector<kv_block_id> blocks;
        int64_t                  n_tokens = 0;
    };
    static size_t idx(kv_block_id b) { return static_cast<size_t>(b); }
    bool valid(int32_t s) const { return s >= 0 && static_cast<size_t>(s) < sessions_.size(); }
    uint64_t & at(seq & s, int64_t p) { return values_[idx(s.blocks[static_cast<size_t>(p / bt_)])][static_cast<size_t>(p % bt_)]; }
    int32_t alloc_locked() {
        for (size_t b = 0; b < refs_.size(); ++b) {
            if (refs_[b] == 0) {
                refs_[b] = 1;
                return static_cast<int32_t>(b);
            }
        }
        return -1;
    }
    void unref_locked(kv_block_id b) {
        if (refs_[idx(b)] <= 0) ++violations_;
        else --refs_[idx(b)];
    }
    void truncate_locked(seq & s, int64_t n) {
        if (n >= s.n_tokens) return;
        const size_t keep = static_cast<size_t>((n + bt_ - 1) / bt_);
        while (s.blocks.size() > keep) { unref_locked(s.blocks.back()); s.blocks.pop_back(); }
        s.n_tokens = n;
    }

    mutable std::mutex                 mu_;
    int32_t                            bt_;
    std::vector<std::vector<uint64_t>> values_;
    std::vector<int32_t>               refs_;
    std::vector<seq>                   sessions_;
    int64_t                            violations_ = 0;
    int64_t                            n_imports_ = 0;
    std::optional<error_code>          fail_import_;
};

// The state a fresh compute of `tokens` leaves in a session of fake_recurrent_backend
// (a hash of the whole prefix, kept apart from the KV numbers).
inline uint64_t expected_state(const std::vector<int32_t> & tokens) {
    uint64_t s = 0x5eed;
    for (int32_t t : tokens) s = mix_kv(s ^ 0xabcdef, t);
    return s;
}

// fake_kv_backend plus, per session, a recurrent state: a number that a compute folds
// every token into and that, like a real recurrent state, cannot be cut back: a
// truncation to its own length keeps it, to 0 resets it, anywhere else invalidates it
// (a compute continuing an invalid state fails). Snapshots serialize as
// "FS" | n_tokens | state | namespace (32) | checksum, words of 8 bytes; import_state
// checks checksum (integrity), namespace and position (invalid_data).
class fake_recurrent_backend final : public kv_backend_i {
public:
    explicit fake_recurrent_backend(int32_t n_blocks = 16, int32_t block_tokens = 4, int32_t n_sessions = 3)
        : kv_(n_blocks, block_tokens, n_sessions), states_(static_cast<size_t>(n_sessions)) {}

    class snapshot final : public state_snapshot_i {
    public:
        snapshot(int64_t n, uint64_t value, const fake_recurrent_backend * owner) : n_(n), value_(value), owner_(owner) {}
        int64_t n_tokens() const override { return n_; }
        int64_t n_bytes() const override { return 16; }
        result<std::vector<uint8_t>> serialize(const digest256 & ns) const override {
            digest256 named = ns;
            if (owner_->foreign_namespace_) named.bytes[0] ^= 0xff;  // a snapshot that names another namespace
            std::vector<uint64_t> w{0x5346, static_cast<uint64_t>(n_), value_};
            for (size_t i = 0; i < 32; i += 8) {
                uint64_t x = 0;
                std::memcpy(&x, named.bytes.data() + i, 8);
                w.push_back(x);
            }
            uint64_t sum = 0;
            for (uint64_t x : w) sum = sum * 31 + x;
            w.push_back(sum);
            std::vector<uint8_t> out(w.size() * 8);
            std::memcpy(out.data(), w.data(), out.size());
            ++owner_->n_serialized_;
            return out;
        }

    private:
        int64_t                        n_;
        uint64_t                       value_;
        const fake_recurrent_backend * owner_;
    };

    // A forward of tokens at [pos_start, +n): KV and state. invalid_argument when the
    // state does not sit at pos_start (and pos_start > 0).
    status compute(int32_t session, int64_t pos_start, std::span<const int32_t> tokens) {
        state & st = states_.at(static_cast<size_t>(session));
        if (pos_start != 0 && st.n != pos_start) return make_error(error_code::invalid_argument, "fake: recurrent state not at the position");
        SKIPPY_TRY(kv_.compute(session, pos_start, tokens));
        if (pos_start == 0) st = state{};
        for (int32_t t : tokens) st.value = mix_kv(st.value ^ 0xabcdef, t);
        st.n = pos_start + static_cast<int64_t>(tokens.size());
        return status::ok();
    }
    uint64_t state_of(int32_t session) const { return states_.at(static_cast<size_t>(session)).value; }
    int64_t state_tokens(int32_t session) const { return states_.at(static_cast<size_t>(session)).n; }
    std::vector<uint64_t> kv_of(int32_t session) const { return kv_.kv_of(session); }
    int64_t violations() const { return kv_.violations(); }
    int64_t total_refs() const { return kv_.total_refs(); }
    // Snapshots from now on name another namespace than the one they are stored under.
    void serialize_foreign_namespace(bool on) { foreign_namespace_ = on; }
    int64_t n_serialized() const { return n_serialized_; }

    int32_t block_tokens() const override { return kv_.block_tokens(); }
    int64_t n_free_blocks() const override { return kv_.n_free_blocks(); }
    int64_t bytes_per_token() const override { return kv_.bytes_per_token(); }
    result<int64_t> session_tokens(int32_t session) const override { return kv_.session_tokens(session); }
    result<std::vector<kv_block_id>> session_blocks(int32_t session, int64_t n_tokens) const override {
        return kv_.session_blocks(session, n_tokens);
    }
    result<int64_t> blocks_needed(int32_t session, int64_t pos_start, int64_t n_tokens) const override {
        return kv_.blocks_needed(session, pos_start, n_tokens);
    }
    void retain(std::span<const kv_block_id> blocks) override { kv_.retain(blocks); }
    void release(std::span<const kv_block_id> blocks) override { kv_.release(blocks); }
    status share_into(int32_t session, std::span<const kv_block_id> blocks, int64_t n_tokens) override {
        SKIPPY_TRY(kv_.share_into(session, blocks, n_tokens));
        cut(session, n_tokens);
        return status::ok();
    }
    status truncate_session(int32_t session, int64_t n_tokens) override {
        SKIPPY_TRY(kv_.truncate_session(session, n_tokens));
        cut(session, n_tokens);
        return status::ok();
    }
    result<std::vector<uint8_t>> export_page(std::span<const kv_block_id> blocks, int64_t n_tokens, int64_t token_start,
                                             int64_t token_count) const override {
        return kv_.export_page(blocks, n_tokens, token_start, token_count);
    }
    status import_page(int32_t session, std::span<const uint8_t> page) override {
        SKIPPY_TRY(kv_.import_page(session, page));
        cut(session, *kv_.session_tokens(session));
        return status::ok();
    }
    bool has_recurrent_state() const override { return true; }
    result<state_snapshot_ptr> snapshot_state(int32_t session, int64_t n_tokens) const override {
        const state & st = states_.at(static_cast<size_t>(session));
        if (st.n != n_tokens) return make_error(error_code::invalid_argument, "fake: the state is not at that length");
        return state_snapshot_ptr(std::make_shared<snapshot>(st.n, st.value, this));
    }
    status import_state(int32_t session, std::span<const uint8_t> bytes, const digest256 & ns) override {
        if (bytes.size() != 8 * 8) return make_error(error_code::invalid_data, "fake snapshot size");
        std::vector<uint64_t> w(8);
        std::memcpy(w.data(), bytes.data(), bytes.size());
        uint64_t sum = 0;
        for (size_t i = 0; i + 1 < w.size(); ++i) sum = sum * 31 + w[i];
        if (w[0] != 0x5346 || sum != w.back()) return make_error(error_code::integrity, "fake snapshot checksum");
        if (std::memcmp(w.data() + 3, ns.bytes.data(), 32) != 0) return make_error(error_code::invalid_data, "fake snapshot: another namespace");
        if (static_cast<int64_t>(w[1]) != *kv_.session_tokens(session)) return make_error(error_code::invalid_data, "fake snapshot: another position");
        states_.at(static_cast<size_t>(session)) = state{static_cast<int64_t>(w[1]), w[2]};
        return status::ok();
    }

private:
    struct state {
        int64_t  n = 0;
        uint64_t value = 0x5eed;
    };
    void cut(int32_t session, int64_t n) {
        state & st = states_.at(static_cast<size_t>(session));
        if (n == st.n) return;
        st = n == 0 ? state{} : state{-1, 0};
    }

    fake_kv_backend          kv_;
    std::vector<state>       states_;
    std::atomic<bool>        foreign_namespace_{false};
    mutable std::atomic<int64_t> n_serialized_{0};
};

// Collects events; thread-safe.
class recording_sink final : public telemetry::event_sink_i {
public:
    void emit(const telemetry::event & e) override {
        std::lock_guard<std::mutex> lock(mu_);
        events_.push_back(e);
    }
    std::vector<telemetry::event> events() const {
        std::lock_guard<std::mutex> lock(mu_);
        return events_;
    }
    void clear() {
        std::lock_guard<std::mutex> lock(mu_);
        events_.clear();
    }
    // The string attribute `key` of the last event named `name`, or "" when absent.
    std::string last(std::string_view name, std::string_view key) const {
        std::lock_guard<std::mutex> lock(mu_);
        for (auto it = events_.rbegin(); it != events_.rend(); ++it) {
            if (it->name != name) continue;
            for (const auto & [k, v] : it->attrs) {
                if (k == key) {
                    if (auto s = std::get_if<std::string>(&v)) return *s;
                    if (auto i = std::get_if<int64_t>(&v)) return std::to_string(*i);
                    if (auto b = std::get_if<bool>(&v)) return *b ? "true" : "false";
                    if (auto d = std::get_if<double>(&v)) return std::to_string(*d);
                }
            }
            return "";
        }
        return "";
    }

private:
    mutable std::mutex             mu_;
    std::vector<telemetry::event>  events_;
};

}  // namespace skippy::cache::testing
