#include "models/diffusion/prepare_records.h"

#include "comm/agree.h"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace zeroshard::models::diffusion {

const data::MediaSample& sample_of_row(const std::vector<data::MediaSample>& samples, int64_t row) {
  const auto it = std::lower_bound(samples.begin(), samples.end(), row,
                                   [](const data::MediaSample& s, int64_t r) { return s.row < r; });
  if (it == samples.end() || it->row != row) throw std::out_of_range("no sample of metadata row " + std::to_string(row));
  return *it;
}

std::string prepared_report(const nlohmann::json& index, size_t max_items) {
  std::string text;
  std::map<std::string, int64_t> groups;
  const std::string group_key = !index.at("items").empty() && index.at("items")[0].contains("bucket") ? "bucket" : "frames";
  size_t shown = 0;
  for (const auto& item : index.at("items")) {
    if (item.contains(group_key)) groups[item.at(group_key).dump()] += 1;
    if (shown++ >= max_items) continue;
    text += "\n  row " + std::to_string(item.at("record").get<int64_t>()) + " " + item.value("media", std::string()) + ":";
    std::string sep = " ";
    for (auto it = item.begin(); it != item.end(); ++it) {
      if (it.key() == "shard" || it.key() == "record" || it.key() == "media" || it.key() == "prompt") continue;
      text += sep + it.key() + " " + (it->is_string() ? it->get<std::string>() : it->dump());
      sep = ", ";
    }
  }
  if (shown > max_items) text += "\n  ... " + std::to_string(shown - max_items) + " more items (index.json lists them all)";
  for (const auto& [value, n] : groups) {
    text += "\n  " + group_key + " " + value + ": " + std::to_string(n) + (n == 1 ? " item" : " items");
  }
  for (const auto& l : index.at("left_out")) text += "\n  left out: " + l.get<std::string>();
  return text;
}

namespace {

// What reading samples rank, rank + world, ... gave: [{"i": index, "info": read.info}] or
// [{"i": index, "why": "<location>: <why>"}].
nlohmann::json read_share(const data::MediaDataset& dataset, const ReadRecord& read, int rank, int world) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = static_cast<size_t>(rank); i < dataset.samples.size(); i += static_cast<size_t>(world)) {
    const data::MediaSample& sample = dataset.samples[i];
    try {
      out.push_back({{"i", i}, {"info", read(sample).info}});
    } catch (const std::exception& e) {
      const std::string why = e.what();
      out.push_back({{"i", i}, {"why", sample.location + ": " + (why.empty() ? std::string("unreadable") : why)}});
    }
  }
  return out;
}

// read_records' index from the shares' entries (any order), and the samples that read.
ReadableRecords merge_shares(const data::MediaDataset& dataset, std::vector<nlohmann::json> entries) {
  std::sort(entries.begin(), entries.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return a.at("i").get<size_t>() < b.at("i").get<size_t>();
  });
  ReadableRecords r;
  nlohmann::json items = nlohmann::json::array(), left_out = dataset.errors;
  for (const nlohmann::json& e : entries) {
    const data::MediaSample& sample = dataset.samples.at(e.at("i").get<size_t>());
    if (e.contains("why")) {
      left_out.push_back(e.at("why"));
      continue;
    }
    nlohmann::json item = {{"record", sample.row}, {"media", sample.media}};
    item.update(e.at("info"));
    items.push_back(std::move(item));
    r.samples.push_back(sample);
  }
  r.index = {{"items", items}, {"left_out", left_out}};
  return r;
}

// A dataset of which no record reads: its metadata file and what was left out.
std::string nothing_reads(const std::string& metadata_path, const nlohmann::json& left_out, const std::string& what) {
  std::string why = metadata_path + ": no record to " + what;
  if (!left_out.empty()) why += " (" + std::to_string(left_out.size()) + " left out):";
  for (size_t i = 0; i < left_out.size() && i < 20; ++i) why += "\n  " + left_out[i].get<std::string>();
  return why;
}

}  // namespace

nlohmann::json read_records(const data::MediaDataset& dataset, const ReadRecord& read) {
  return merge_shares(dataset, read_share(dataset, read, 0, 1)).index;
}

ReadableRecords readable_records(Communicator& comm, const data::MediaDataset& dataset, const ReadRecord& read) {
  const std::string mine = read_share(dataset, read, comm.rank(), comm.world_size()).dump();
  std::vector<nlohmann::json> entries;
  for (const std::string& share : all_gather_strings(comm, mine)) {
    for (nlohmann::json& e : nlohmann::json::parse(share)) entries.push_back(std::move(e));
  }
  ReadableRecords r = merge_shares(dataset, std::move(entries));
  if (r.samples.empty()) {
    throw std::invalid_argument(nothing_reads(dataset.metadata_path, r.index.at("left_out"), "train on"));
  }
  return r;
}

std::vector<std::string> left_out_notes(const std::string& key, const std::string& skip_key,
                                        const nlohmann::json& index) {
  const size_t n = index.at("items").size(), bad = index.at("left_out").size();
  std::vector<std::string> notes = {key + ": training reads " + std::to_string(n) + " of " + std::to_string(n + bad) +
                                    " records (" + skip_key + "=skip left out " + std::to_string(bad) + ")"};
  for (const auto& l : index.at("left_out")) notes.push_back("  left out: " + l.get<std::string>());
  return notes;
}

std::string dry_run_report(const std::string& series, const std::string& where, const nlohmann::json& index,
                           bool towers_in_loop, bool skip) {
  const size_t n = index.at("items").size(), bad = index.at("left_out").size();
  std::string text = series + ": training reads " + std::to_string(n) + " of " + std::to_string(n + bad) +
                     " records from " + where + (towers_in_loop ? " (towers in the loop)" : " (a prepared cache)");
  text += prepared_report(index);
  if (towers_in_loop && !skip && bad > 0) {
    throw std::invalid_argument(text + "\n" + std::to_string(bad) + " record(s) above cannot be read: training with the " +
                                "towers in the loop stops at the first; with " + series + ".on_bad_file=skip it " +
                                "leaves them out (each rank reads its share of the records once before the first " +
                                "step), and so does `zeroshard prepare` with it, whose cache (" + series +
                                ".cache) training then reads alone");
  }
  return text;
}

void prepare_records(Communicator& comm, const data::MediaDataset& dataset, const std::string& skip_key,
                     bool skip, CacheWriter& writer, const RecordHandlers& handlers) {
  const std::vector<data::MediaSample>& samples = dataset.samples;
  if (samples.empty()) throw std::invalid_argument(nothing_reads(dataset.metadata_path, dataset.errors, "prepare"));
  const int rank = comm.rank(), world = comm.world_size();
  const int64_t N = static_cast<int64_t>(samples.size());
  for (int64_t r = 0; r < record_rounds(N, world); ++r) {
    const int64_t record = r * world + rank;
    const bool real = record < N;
    const data::MediaSample& sample = samples[static_cast<size_t>(real ? record : 0)];
    std::string error;
    RecordRead read;
    if (real) {
      try {
        read = handlers.read(sample);
      } catch (const std::exception& e) {
        error = sample.location + ": " + e.what();
        if (error.size() == sample.location.size() + 2) error += "unreadable";
      }
    }
    // Every rank's (bad, passes): one fixed-size gather, so no rank waits on a rank that stopped.
    at::Tensor all = at::empty({2 * world}, at::kLong);
    comm.all_gather(at::tensor({static_cast<int64_t>(error.empty() ? 0 : 1), read.passes}, at::kLong), all);
    const int64_t* a = all.data_ptr<int64_t>();
    bool any_bad = false;
    int64_t round_passes = 1;
    for (int q = 0; q < world; ++q) {
      any_bad = any_bad || a[2 * q] != 0;
      if (a[2 * q] == 0) round_passes = std::max(round_passes, a[2 * q + 1]);
    }
    if (any_bad && !skip) {
      const std::string message = first_error(comm, error);
      throw std::runtime_error(message + " (prepare stops at the first bad record; " + skip_key + "=skip leaves such records out and lists them)");
    }
    if (!error.empty()) writer.left_out(sample.row, error);
    const bool stand_in = !real || !error.empty();
    NamedTensors out = handlers.encode(sample, round_passes, stand_in);
    if (!stand_in) writer.add(sample.row, std::move(out), std::move(read.info));
  }
}

}  // namespace zeroshard::models::diffusion
