// Agreeing across ranks on strings (defined in communicator.cpp). Each collective sends sizes
// before bytes, so ranks holding strings of different lengths always join collectives of the same
// size.
#pragma once

#include "zeroshard/comm.h"

#include <string>
#include <vector>

namespace zeroshard {

// Rank `root`'s `mine` on every rank (e.g. the run folder rank 0 chose).
std::string broadcast_string(Communicator& comm, const std::string& mine, int root);

// Every rank's `mine`, in rank order, on every rank (e.g. what each rank found in its share of
// the records).
std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& mine);

// "" on every rank when every rank's `error` is empty. Otherwise every rank gets the message of
// the lowest rank whose `error` is not empty; the other ranks append " (rank q)". A rank that
// fails alone calls this instead of throwing, so the others never wait in a collective it will
// not join.
std::string first_error(Communicator& comm, const std::string& error);

}  // namespace zeroshard
