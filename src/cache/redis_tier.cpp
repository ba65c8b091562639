#include "cache/redis_tier.h"

#include "cache/memory_tiers.h"
#include "cache/page_record.h"

#include <algorithm>

namespace skippy::cache {
namespace {

constexpr size_t k_published_memo = 1024;

std::span<const uint8_t> bytes_of(std::string_view s) { return {reinterpret_cast<const uint8_t *>(s.data()), s.size()}; }

constexpr std::string_view k_exists = "EXISTS", k_get = "GET", k_set = "SET", k_del = "DEL";

}  // namespace

std::string redis_tier::page_key_name(const digest256 & ns, const digest256 & page_key) {
    return "skippy:kv:1:" + ns.hex() + ":" + page_key.hex();
}

redis_tier::redis_tier(const redis_tier_config & config, redis_url url) : config_(config), url_(std::move(url)) {}

result<std::unique_ptr<redis_tier>> redis_tier::create(const redis_tier_config & config) {
    SKIPPY_ASSIGN_OR_RETURN(redis_url url, parse_redis_url(config.url));
    if (config.timeout_ms < 1 || config.page_tokens < 1) return make_error(error_code::invalid_argument, "Redis tier config");
    return std::unique_ptr<redis_tier>(new redis_tier(config, std::move(url)));
}

redis_tier::clock_type::time_point redis_tier::deadline_for(int64_t bytes) const {
    const int64_t transfer_ms = config_.min_bytes_per_second > 0 ? bytes * 1000 / config_.min_bytes_per_second : 0;
    return clock_type::now() + std::chrono::milliseconds(config_.timeout_ms + transfer_ms);
}

result<std::unique_ptr<redis_connection>> redis_tier::take(bool publisher) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (clock_type::now() < rest_until_) {
            ++counts_.n_resting;
            return make_error(error_code::unavailable, "Redis tier resting after a failure");
        }
        if (publisher && publisher_) return std::move(publisher_);
        if (!publisher && !pool_.empty()) {
            auto c = std::move(pool_.back());
            pool_.pop_back();
            return c;
        }
    }
    auto c = redis_connection::connect(url_, config_.timeout_ms);  // without the lock: it may take the whole timeout
    if (!c.is_ok()) note_failure(c.error());
    return c;
}

void redis_tier::give_back(std::unique_ptr<redis_connection> c, bool publisher) {
    if (!c || c->broken()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (publisher) {
        publisher_ = std::move(c);
    } else if (static_cast<int32_t>(pool_.size()) < config_.max_connections) {
        pool_.push_back(std::move(c));
    }
}

void redis_tier::note_failure(const status & st) {
    (void)st;
    std::lock_guard<std::mutex> lock(mutex_);
    ++counts_.n_errors;
    rest_until_ = clock_type::now() + std::chrono::milliseconds(config_.backoff_ms);
}

result<int64_t> redis_tier::chain_end(redis_connection & c, const cache_namespace & ns, std::span<const token_id> tokens,
                                      int64_t want, int64_t & matched) {
    // Ends of the pages before the one covering `want`, then the candidates for its last
    // page: a stored prompt ending exactly at `want`, or a whole page past it.
    const int64_t p = config_.page_tokens;
    const int64_t n_full = (want - 1) / p;
    std::vector<int64_t> ends;
    for (int64_t k = 1; k <= n_full; ++k) ends.push_back(k * p);
    // (or one ending with the query, when the query is shorter than that page).
    const int64_t up = std::min((n_full + 1) * p, static_cast<int64_t>(tokens.size()));
    std::vector<int64_t> lasts{want};
    if (up > want) lasts.push_back(up);
    std::vector<std::string> names;
    for (int64_t e : ends) names.push_back(page_key_name(ns.hash, prefix_hash(ns, tokens.first(static_cast<size_t>(e)))));
    for (int64_t e : lasts) names.push_back(page_key_name(ns.hash, prefix_hash(ns, tokens.first(static_cast<size_t>(e)))));
    std::vector<redis_command> cmds;
    for (const std::string & n : names) cmds.push_back({bytes_of(k_exists), bytes_of(n)});
    SKIPPY_ASSIGN_OR_RETURN(std::vector<redis_value> replies, c.run(cmds, deadline_for(0)));
    auto present = [&](size_t i) { return replies[i].type == redis_value::kind::integer && replies[i].integer == 1; };
    for (const redis_value & v : replies) {
        if (v.type != redis_value::kind::integer || (v.integer != 0 && v.integer != 1)) {
            return make_error(error_code::invalid_data, "Redis: EXISTS answered neither 0 nor 1");
        }
    }
    size_t run = 0;
    while (run < ends.size() && present(run)) ++run;
    matched = static_cast<int64_t>(run) * p;
    if (run < ends.size()) return matched;
    for (size_t j = 0; j < lasts.size(); ++j) {
        if (present(ends.size() + j)) {
            matched = lasts[j];
            return lasts[j];  // >= want
        }
    }
    return matched;
}

tier_peek_result redis_tier::peek(const tier_peek_request & req) {
    tier_peek_result r;
    if (req.target <= 0) return r;
    auto c = take(false);
    if (!c.is_ok()) {
        r.error = c.error().code();
        return r;
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        ++counts_.n_lookups;
    }
    auto end = chain_end(**c, req.ns, req.tokens, req.target, r.matched_tokens);
    if (!end.is_ok()) {
        note_failure(end.error());
        r.error = end.error().code();
        if ((*c)->timed_out()) {
            std::lock_guard<std::mutex> lock(mutex_);
            ++counts_.n_timeouts;
        }
        return r;
    }
    give_back(std::move(*c), false);
    r.restorable_tokens = std::min(*end, req.target);
    return r;
}

tier_restore_result redis_tier::restore(const tier_restore_request & req) {
    tier_restore_result r;
    const int64_t n = req.n_tokens;
    auto c = take(false);
    if (!c.is_ok()) {
        r.error = c.error().code();
        return r;
    }
    auto failed = [&](const status & st) {
        if ((*c)->broken()) {
            note_failure(st);
            if ((*c)->timed_out()) {
                std::lock_guard<std::mutex> lock(mutex_);
                ++counts_.n_timeouts;
            }
        } else {
            give_back(std::move(*c), false);
        }
        r.error = st.code();
        return r;
    };
    int64_t matched = 0;
    auto end = chain_end(**c, req.ns, req.tokens, n, matched);
    if (!end.is_ok()) return failed(end.error());
    if (*end < n) return failed(make_error(error_code::not_found, "Redis no longer holds the prefix"));
    struct planned {
        int64_t   start = 0, count = 0;
        digest256 key;
        std::string name;
    };
    std::vector<planned> plan;
    for (int64_t start = 0; start < n; start += config_.page_tokens) {
        const int64_t stop = std::min(start + config_.page_tokens, *end);
        planned p{start, stop - start, prefix_hash(req.ns, req.tokens.first(static_cast<size_t>(stop))), {}};
        p.name = page_key_name(req.ns.hash, p.key);
        plan.push_back(std::move(p));
    }
    std::vector<redis_command> gets;
    for (const planned & p : plan) gets.push_back({bytes_of(k_get), bytes_of(p.name)});
    const int64_t expect = config_.bytes_per_token * n + static_cast<int64_t>(plan.size() * page_record_overhead_bytes);
    auto values = (*c)->run(gets, deadline_for(expect));
    if (!values.is_ok()) return failed(values.error());
    std::vector<page_bytes> pages;
    for (size_t i = 0; i < plan.size(); ++i) {
        const redis_value & v = (*values)[i];
        if (v.type == redis_value::kind::nil) return failed(make_error(error_code::not_found, "Redis page evicted meanwhile"));
        status bad;
        if (v.type != redis_value::kind::string) {
            bad = make_error(error_code::invalid_data, "Redis page is not a string");
        } else if (auto payload = verify_page_record(bytes_of(v.str), req.ns.hash, plan[i].key, plan[i].start, plan[i].count);
                   !payload.is_ok()) {
            bad = payload.error();
        } else {
            page_bytes pb;
            pb.token_start = plan[i].start;
            pb.token_count = plan[i].count;
            pb.bytes.assign(payload->begin(), payload->end());
            pages.push_back(std::move(pb));
            continue;
        }
        // Never served, and nobody else should meet it: delete it (best effort).
        {
            std::lock_guard<std::mutex> lock(mutex_);
            ++counts_.n_bad_values;
        }
        const redis_command del[] = {{bytes_of(k_del), bytes_of(plan[i].name)}};
        (void)(*c)->run(del, deadline_for(0));
        r.quarantined = true;
        return failed(bad);
    }
    values->clear();  // free the copies before importing
    give_back(std::move(*c), false);
    if (status st = req.importer->import(req.session, pages, n); !st.is_ok()) {
        r.error = st.code();
        std::lock_guard<std::mutex> lock(mutex_);
        if (is_validation_error(st.code())) ++counts_.n_bad_values;
        return r;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    ++counts_.n_restores;
    counts_.n_pages_fetched += static_cast<int64_t>(pages.size());
    r.imported_pages = static_cast<int64_t>(pages.size());
    return r;
}

tier_record_result redis_tier::record(const tier_record_request & req) {
    tier_record_result r;
    const digest256 key = prefix_hash(req.ns, req.tokens);
    std::lock_guard<std::mutex> lock(mutex_);
    const bool recent = std::find(published_.begin(), published_.end(), key) != published_.end();
    r.state = recent ? tier_record_state::covered : tier_record_state::wants_pages;
    return r;
}

tier_store_result redis_tier::store(const tier_store_request & req) {
    tier_store_result r;
    if (req.pages.empty()) {
        r.error = error_code::invalid_argument;
        return r;
    }
    auto c = take(true);
    if (!c.is_ok()) {
        r.state = tier_store_state::error;
        r.error = c.error().code();
        return r;
    }
    auto failed = [&](const status & st) {
        note_failure(st);
        if ((*c)->timed_out()) {
            std::lock_guard<std::mutex> lock(mutex_);
            ++counts_.n_timeouts;
        }
        r.state = tier_store_state::error;
        r.error = st.code();
        r.n_pages_written = 0;
        r.bytes_written = 0;
        return r;
    };
    std::vector<digest256> keys;
    std::vector<std::string> names;
    for (const page_bytes & p : req.pages) {
        const int64_t end = p.token_start + p.token_count;
        if (end > static_cast<int64_t>(req.tokens.size())) return failed(make_error(error_code::invalid_argument, "page past the tokens"));
        keys.push_back(prefix_hash(req.ns, req.tokens.first(static_cast<size_t>(end))));
        names.push_back(page_key_name(req.ns.hash, keys.back()));
    }
    std::vector<redis_command> exists;
    for (const std::string & n : names) exists.push_back({bytes_of(k_exists), bytes_of(n)});
    auto held = (*c)->run(exists, deadline_for(0));
    if (!held.is_ok()) return failed(held.error());
    std::vector<std::vector<uint8_t>> records;
    std::vector<size_t> which;
    int64_t bytes = 0;
    for (size_t i = 0; i < req.pages.size(); ++i) {
        const redis_value & v = (*held)[i];
        if (v.type == redis_value::kind::integer && v.integer == 1) continue;
        page_record_header h;
        h.ns = req.ns.hash;
        h.key = keys[i];
        h.token_start = req.pages[i].token_start;
        h.token_count = req.pages[i].token_count;
        records.push_back(encode_page_record(h, req.pages[i].bytes));
        bytes += static_cast<int64_t>(records.back().size());
        which.push_back(i);
    }
    if (!records.empty()) {
        std::vector<redis_command> sets;
        for (size_t j = 0; j < records.size(); ++j) sets.push_back({bytes_of(k_set), bytes_of(names[which[j]]), records[j]});
        auto done = (*c)->run(sets, deadline_for(bytes));
        if (!done.is_ok()) return failed(done.error());
        for (const redis_value & v : *done) {
            if (v.type != redis_value::kind::status) return failed(make_error(error_code::unavailable, "Redis refused a SET: " + v.str));
        }
    }
    give_back(std::move(*c), true);
    r.state = records.empty() ? tier_store_state::present : tier_store_state::stored;
    r.n_pages_written = static_cast<int64_t>(records.size());
    r.bytes_written = bytes;
    std::lock_guard<std::mutex> lock(mutex_);
    counts_.n_pages_published += r.n_pages_written;
    counts_.n_bytes_published += bytes;
    published_.push_back(keys.back());
    if (published_.size() > k_published_memo) published_.erase(published_.begin());
    return r;
}

tier_evict_result redis_tier::evict(const tier_evict_request &) {
    return tier_evict_result{};  // the server evicts (maxmemory-policy), not us
}

redis_tier_stats redis_tier::redis_stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return counts_;
}

tier_stats redis_tier::stats() const {
    const redis_tier_stats s = redis_stats();
    tier_stats t;
    t.errors = s.n_errors + s.n_bad_values;
    return t;
}

}  // namespace skippy::cache
