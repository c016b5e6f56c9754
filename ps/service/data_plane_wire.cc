#include "ps/service/data_plane_wire.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace pscluster {
namespace {

void CopyTensorMeta(const TensorProto& from, TensorProto* to) {
  to->set_dtype(from.dtype());
  *to->mutable_shape() = from.shape();
}

}  // namespace

void PayloadFields(PullRequest* m, std::vector<std::string*>* out) {
  for (RowIds& lookup : *m->mutable_lookups()) out->push_back(lookup.mutable_ids());
}

void PayloadFields(PushRequest* m, std::vector<std::string*>* out) {
  for (NamedTensor& g : *m->mutable_gradients()) {
    if (g.has_tensor()) out->push_back(g.mutable_tensor()->mutable_data());
  }
  for (SparseGradient& s : *m->mutable_sparse()) {
    out->push_back(s.mutable_ids());
    if (s.has_rows()) out->push_back(s.mutable_rows()->mutable_data());
  }
  if (m->has_pull()) PayloadFields(m->mutable_pull(), out);
}

void PayloadFields(PullResponse* m, std::vector<std::string*>* out) {
  for (NamedTensor& t : *m->mutable_tensors()) {
    if (t.has_tensor()) out->push_back(t.mutable_tensor()->mutable_data());
  }
  for (NamedTensor& t : *m->mutable_rows()) {
    if (t.has_tensor()) out->push_back(t.mutable_tensor()->mutable_data());
  }
}

void PayloadFields(PushResponse* m, std::vector<std::string*>* out) {
  if (m->has_pulled()) PayloadFields(m->mutable_pulled(), out);
}

void SplitRequest(const PullRequest& request, PullRequest* meta,
                  std::vector<absl::string_view>* payloads) {
  *meta->mutable_names() = request.names();
  meta->set_job(request.job());
  for (const RowIds& lookup : request.lookups()) {
    meta->add_lookups()->set_name(lookup.name());
    payloads->push_back(lookup.ids());
  }
  if (request.has_lease()) *meta->mutable_lease() = request.lease();
  if (request.has_auth()) *meta->mutable_auth() = request.auth();
}

void SplitRequest(const PushRequest& request, PushRequest* meta,
                  std::vector<absl::string_view>* payloads) {
  for (const NamedTensor& g : request.gradients()) {
    NamedTensor* m = meta->add_gradients();
    m->set_name(g.name());
    if (g.has_tensor()) {
      CopyTensorMeta(g.tensor(), m->mutable_tensor());
      payloads->push_back(g.tensor().data());
    }
  }
  for (const SparseGradient& s : request.sparse()) {
    SparseGradient* m = meta->add_sparse();
    m->set_name(s.name());
    payloads->push_back(s.ids());
    if (s.has_rows()) {
      CopyTensorMeta(s.rows(), m->mutable_rows());
      payloads->push_back(s.rows().data());
    }
  }
  if (request.has_update()) *meta->mutable_update() = request.update();
  if (request.has_pull()) SplitRequest(request.pull(), meta->mutable_pull(), payloads);
  meta->set_job(request.job());
}

template <typename Message>
absl::Status WriteMessage(FrameStream& stream, uint16_t kind, Message* message, absl::Time deadline) {
  std::vector<std::string*> fields;
  PayloadFields(message, &fields);
  std::vector<std::string> held(fields.size());
  for (size_t i = 0; i < fields.size(); ++i) fields[i]->swap(held[i]);
  const std::string meta = message->SerializeAsString();
  std::vector<absl::string_view> payloads(held.begin(), held.end());
  absl::Status s = WriteFrame(stream, kind, 0, meta, payloads, deadline);
  for (size_t i = 0; i < fields.size(); ++i) fields[i]->swap(held[i]);
  return s;
}

template <typename Message>
absl::Status ParseFrameMeta(const FrameHead& head, Message* message,
                            std::vector<std::string>* kept) {
  // The buffers of the message's last payloads, kept for this one's.
  std::vector<std::string*> fields;
  PayloadFields(message, &fields);
  kept->clear();
  kept->resize(fields.size());
  for (size_t i = 0; i < fields.size(); ++i) fields[i]->swap((*kept)[i]);
  if (!message->ParseFromString(head.meta)) {
    return absl::InvalidArgumentError(absl::StrCat("malformed ", message->GetTypeName(),
                                                   " on the data plane (", head.meta.size(),
                                                   " bytes of meta)"));
  }
  fields.clear();
  PayloadFields(message, &fields);
  if (fields.size() != head.payload_sizes.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(message->GetTypeName(), " on the data plane announces ", fields.size(),
                     " tensors but its frame carries ", head.payload_sizes.size()));
  }
  // Bytes the meta carried inline in payload fields are dropped: the
  // payloads replace them.
  for (std::string* field : fields) field->clear();
  return absl::OkStatus();
}

template <typename Message>
absl::Status ReadFramePayloads(FrameStream& stream, const FrameHead& head, Message* message,
                               std::vector<std::string>* kept, absl::Time deadline,
                               const FrameGrowth& grow) {
  std::vector<std::string*> fields;
  PayloadFields(message, &fields);
  for (size_t i = 0; i < fields.size(); ++i) {
    std::string* field = fields[i];
    if (i < kept->size()) field->swap((*kept)[i]);
    // Into the kept buffer when it is large enough (shrinking or keeping the
    // size writes nothing); else it grows as the bytes arrive.
    if (absl::Status s = ReadGrowing(stream, head.payload_sizes[i], field, deadline, grow); !s.ok()) {
      return s;
    }
  }
  kept->clear();
  return absl::OkStatus();
}

template <typename Message>
absl::Status ReceiveMessage(FrameStream& stream, const FrameHead& head, Message* message, absl::Time deadline,
                            const FrameGrowth& grow) {
  std::vector<std::string> kept;
  if (absl::Status s = ParseFrameMeta(head, message, &kept); !s.ok()) return s;
  return ReadFramePayloads(stream, head, message, &kept, deadline, grow);
}

template absl::Status WriteMessage(FrameStream&, uint16_t, PushResponse*, absl::Time);
template absl::Status WriteMessage(FrameStream&, uint16_t, PullResponse*, absl::Time);
template absl::Status ReceiveMessage(FrameStream&, const FrameHead&, PushRequest*, absl::Time,
                                     const FrameGrowth&);
template absl::Status ReceiveMessage(FrameStream&, const FrameHead&, PullRequest*, absl::Time,
                                     const FrameGrowth&);
template absl::Status ReceiveMessage(FrameStream&, const FrameHead&, PushResponse*, absl::Time,
                                     const FrameGrowth&);
template absl::Status ReceiveMessage(FrameStream&, const FrameHead&, PullResponse*, absl::Time,
                                     const FrameGrowth&);
template absl::Status ParseFrameMeta(const FrameHead&, PushRequest*, std::vector<std::string>*);
template absl::Status ParseFrameMeta(const FrameHead&, PullRequest*, std::vector<std::string>*);
template absl::Status ReadFramePayloads(FrameStream&, const FrameHead&, PushRequest*,
                                        std::vector<std::string>*, absl::Time,
                                        const FrameGrowth&);
template absl::Status ReadFramePayloads(FrameStream&, const FrameHead&, PullRequest*,
                                        std::vector<std::string>*, absl::Time,
                                        const FrameGrowth&);

}  // namespace pscluster
