// The job spec: what a user writes in a job YAML, parsed and validated.
//
// ParseJobSpec reports every problem as "file:line:column: what is wrong", so
// a user can find it in the YAML. The same spec runs in one process
// (strategy: one_device) or on a cluster (strategy: parameter_server).
#ifndef PSCLUSTER_COMMON_JOB_SPEC_H_
#define PSCLUSTER_COMMON_JOB_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/partitioner.h"
#include "protos/ps.pb.h"

namespace pscluster {

// parameter_server: asynchronous PS training (TF's ParameterServerStrategy);
// one_device: one replica in one process; central_storage: synchronous PS
// training (TF's CentralStorageStrategy over workers): every step, each
// worker computes the gradients of its slice of the global batch and the PS
// applies their mean once (ps/core/sync_steps.h); mirrored: `devices`
// replicas in one process (TF's MirroredStrategy), trained like one_device
// with the batch of each step split over the replicas and their gradients
// reduced in the process. `devices` > 1 also gives each worker of
// parameter_server and central_storage that many replicas (replicas =
// workers x devices); multi_worker_mirrored: no PS, every worker holds the
// whole model and its optimizer state and applies each step's gradients,
// all-reduced over a ring of the workers (TF's MultiWorkerMirroredStrategy;
// worker/core/mirrored_ps_client.h).
enum class Strategy {
  kParameterServer,
  kOneDevice,
  kCentralStorage,
  kMirrored,
  kMultiWorkerMirrored
};

// central_storage and multi_worker_mirrored: every step is one update from
// the whole global batch, the workers in lockstep.
inline bool IsSynchronous(Strategy s) {
  return s == Strategy::kCentralStorage || s == Strategy::kMultiWorkerMirrored;
}
enum class DevicePreference { kAuto, kCpu, kCuda };
// Activations of dense and conv2d layers (and bare activation layers):
// relu, tanh, sigmoid, and gelu (the exact erf form, Keras' default).
enum class Activation { kNone, kRelu, kTanh, kSigmoid, kGelu };
// Padding of conv2d and pooling layers, as TF: kValid uses only whole
// windows; kSame pads (zeros for conv, ignored for pooling) so that the
// output is ceil(input / stride).
enum class Padding { kValid, kSame };

// The largest value each size in a job may take. ParseJobSpec refuses a job
// past any of them (INVALID_ARGUMENT naming the field and the limit), so
// that no job can overflow an integer, start unbounded threads or make a
// process allocate without bound; the coordinator also checks the job's
// parameter and slot bytes per PS against its memory limit at submit time
// (coordinator/core/job_admission.h).
struct JobLimits {
  static constexpr int64_t kMaxBatch = int64_t{1} << 16;             // per_replica_batch
  static constexpr int64_t kMaxReplicas = int64_t{1} << 14;          // workers x devices
  static constexpr int64_t kMaxDevices = 64;                         // devices (per worker)
  static constexpr int64_t kMaxGlobalBatch = kMaxBatch * kMaxReplicas;  // global_batch
  static constexpr int64_t kMaxUnits = int64_t{1} << 16;             // a dense layer's units
  static constexpr int64_t kMaxDenseInputs = int64_t{1} << 24;       // model.inputs.dense
  static constexpr int64_t kMaxVocab = int64_t{1} << 32;             // vocab_size, max_rows
  static constexpr int64_t kMaxEmbeddingDim = 4096;
  static constexpr int64_t kMaxBoundaries = 1 << 16;                  // boundaries per feature
  static constexpr int64_t kMaxDataFiles = 1 << 16;                   // files in one csv path list
  static constexpr int64_t kMaxStreamShuffle = int64_t{1} << 24;      // stream.shuffle_buffer records
  static constexpr int64_t kMaxEpochs = 100000;
  static constexpr int64_t kMaxStepsPerClosure = 1000000;
  static constexpr int64_t kMaxClosuresPerWorker = 64;               // dispatch threads per worker
  static constexpr int64_t kMaxClosuresPerRpc = 1024;
  static constexpr int64_t kMaxStaleness = 1000000;                   // train.max_staleness
  static constexpr int64_t kMaxExamples = int64_t{1} << 40;          // limit, num_examples, every_steps
  static constexpr int64_t kMaxIdSpace = int64_t{1} << 62;           // synthetic_ctr id_space
  static constexpr int64_t kMaxShards = 4096;                        // partitioner shards
  static constexpr int64_t kMaxCheckpointsKept = 1000;
  static constexpr int64_t kMaxCheckpointRetries = 100;
  static constexpr double kMaxCheckpointBackoffSeconds = 3600;
  static constexpr int64_t kMaxAttempts = 100;
  // fault_tolerance.worker_timeout_s, in seconds (one hour).
  static constexpr double kMaxWorkerTimeoutS = 3600;
  // batch x units of any layer: the activations a worker holds for it
  // (2^28 floats = 1 GiB).
  static constexpr int64_t kMaxActivationElements = int64_t{1} << 28;
  // conv2d kernels and strides, pooling windows (each side).
  static constexpr int64_t kMaxWindow = 64;
};

// What one example of a layer's input or output is: an image [height,
// width, channels] (row-major, channels last, as TF's NHWC), or a flat
// vector of `channels` values (height = width = 1, image = false).
struct FeatureShape {
  int64_t height = 1;
  int64_t width = 1;
  int64_t channels = 0;
  bool image = false;
  int64_t size() const { return height * width * channels; }
};

// One layer of model.layers (README "Layers" has the YAML).
struct LayerSpec {
  enum class Kind {
    kDense,       // {units, activation, l2}: needs a flat input
    kActivation,  // bare relu | tanh | sigmoid | gelu
    kConv2d,      // {filters, kernel, stride, padding, activation, l2}: needs an image
    kMaxPool,     // {pool, stride, padding}: needs an image
    kAvgPool,     // same options as kMaxPool
    kFlatten,     // image -> flat vector (a no-op on a flat input)
    kDropout,     // {rate}: training only
    kBatchNorm,   // {momentum, epsilon}: per channel (last axis)
    // {rank, l2} (or `cross` / {cross: {}}): a DCN-v2 cross layer,
    // y = x0 * (x W + b) + x with W [d, d] (or, with rank r, the low-rank
    // W = U V, U [d, r], V [r, d]), where x0 is the model's input
    // ([dense | embeddings]) and d its width; its input must be that wide
    // (cross layers come first, before any dense layer).
    kCross,
    // Not a layer of model.layers: Model's DLRM dot interaction between
    // model.bottom and model.layers (ModelSpec::bottom).
    kDotInteraction,
  };
  Kind kind = Kind::kDense;
  int64_t units = 0;                          // kDense; kConv2d: filters
  Activation activation = Activation::kNone;  // kDense, kConv2d, kActivation
  // kConv2d kernel / pooling window, and their strides (pooling's default
  // stride is its window, conv2d's is 1).
  int64_t window_h = 1;
  int64_t window_w = 1;
  int64_t stride_h = 1;
  int64_t stride_w = 1;
  Padding padding = Padding::kValid;
  double rate = 0;  // kDropout: the fraction of values zeroed, in [0, 1)
  int64_t rank = 0;  // kCross: 0 = full rank; r > 0: W = U V of rank r (r < d)
  // kBatchNorm: moving = momentum * moving + (1 - momentum) * batch
  // statistic (Keras' defaults).
  float momentum = 0.99f;
  float epsilon = 1e-3f;
  // kDense, kConv2d, kCross: this kernel's L2 strength, overriding model.l2 when
  // has_l2.
  bool has_l2 = false;
  float l2 = 0;
  // Filled by ParseJobSpec from model.inputs and the layers before it.
  FeatureShape input;
  FeatureShape output;
};

enum class Combiner { kSum, kMean };
enum class OutOfVocabulary { kError, kHash };

// A categorical input: each example has zero or more ids, each looked up in
// an embedding table, combined into one [embedding_dim] vector.
struct CategoricalFeatureSpec {
  std::string name;
  // The data column it reads (CSV); defaults to `name`.
  std::string column;
  // > 0: a fixed vocabulary: a [vocab_size, embedding_dim] variable, split
  // by the job's partitioner; ids must lie in [0, vocab_size).
  int64_t vocab_size = 0;
  // true: ids are hashed into a dynamic hash table (one shard per PS) whose
  // rows are created on first touch. Exactly one of vocab_size / hashed.
  bool hashed = false;
  int64_t embedding_dim = 8;
  Combiner combiner = Combiner::kSum;
  // Fixed vocabulary: an id outside [0, vocab_size) is an error, or is
  // hashed into the vocabulary.
  OutOfVocabulary oov = OutOfVocabulary::kError;
  // Multi-valued string column: values separated by this (e.g. "|").
  std::string separator;
  // Numeric column bucketized: id = floor(value / bucket_width).
  double bucket_width = 0;
  // Numeric column bucketized by explicit, strictly increasing boundaries
  // (TF's bucketized_column): id = the number of boundaries <= value, in
  // [0, boundaries.size()]. At most one of bucket_width / boundaries.
  std::vector<double> boundaries;
  // A feature cross over two or more columns (then `column` is empty): one
  // id per row, a hash of the crossed values together (features.h); a
  // numeric crossed column is bucketized first when bucket_width or
  // boundaries is set. No separator: crossed columns are single-valued.
  std::vector<std::string> cross;
  // Hash table bound (0 = unbounded) and what it evicts past the bound.
  int64_t max_rows = 0;
  EvictionPolicy eviction = LFU;
  // Default random_uniform(-0.05, 0.05), as Keras' Embedding.
  InitializerProto initializer;
};

struct ModelSpec {
  // Dense float inputs per example (may be 0 when categorical inputs exist).
  int64_t dense_inputs = 0;
  // model.inputs.image: [H, W, C]: the dense inputs are one H x W x C image
  // per example (row-major, channels last; an idx image of 28x28 pixels is
  // [28, 28, 1]). image.image is false without it. Sets dense_inputs to
  // H * W * C; not combined with categorical inputs.
  FeatureShape image;
  std::vector<CategoricalFeatureSpec> categorical;
  std::vector<LayerSpec> layers;
  // model.bottom (DLRM, Naumov et al. 2019): dense layers over the dense
  // inputs alone, the last of `embedding_dim` units (every categorical
  // feature has that one dim k). Its output z0 and the F combined
  // embeddings z1..zF meet in the dot interaction: `layers` (the top MLP)
  // then reads [z0 | <zi, zj> for every pair i < j] (k + (F+1)F/2 values;
  // pairs in order (0,1), (0,2), ..., (1,2), ...). Not with fm, wide, cross.
  std::vector<LayerSpec> bottom;
  // softmax_cross_entropy (multi-class, accuracy) or sigmoid_cross_entropy
  // (binary: the last layer has 1 unit; AUC and logloss), or mse / huber
  // between the last layer's outputs and the one-hot label (the 0/1 label
  // itself with 1 output unit); accuracy by argmax (by output >= 0.5 with
  // 1 unit).
  std::string loss = "softmax_cross_entropy";
  // huber: quadratic for |error| <= delta, linear beyond (Keras' default 1).
  float huber_delta = 1.0f;
  // L2 regularization of every dense and conv2d kernel (not biases or batch
  // norm): the loss adds l2 / 2 * sum(w^2), the gradient l2 * w (TF's
  // l2_loss convention; Keras' L2(l) is this with l2 = 2 * l). The loss a
  // job reports, train and eval, includes it. A layer's own l2 overrides it.
  float l2 = 0;
  InitializerProto kernel_initializer;  // default glorot_uniform
  InitializerProto bias_initializer;    // default zeros
  // Scalar heads added to the logit of the last layer (which then must have
  // 1 unit), for the CTR models of the literature:
  //  - model.fm: true (DeepFM): the factorization machine's second-order
  //    term 0.5 * sum_d[(sum_f v_fd)^2 - sum_f v_fd^2] over the combined
  //    embeddings v_f of every categorical feature not in wide.categorical
  //    (at least 2, all of one embedding_dim).
  //  - model.wide: {categorical: [names], dense: bool} (Wide & Deep, and
  //    DeepFM's first-order terms): the named features (embedding_dim 1)
  //    leave the deep input and their combined 1-dim embeddings are summed
  //    into the logit; dense: true adds a linear term over the dense inputs
  //    (the variable "wide/dense_kernel" [dense_inputs, 1], zeros at first,
  //    no l2).
  bool fm = false;
  std::vector<std::string> wide_categorical;
  bool wide_dense = false;
};

struct ColumnSpec {
  enum class Type { kInt, kFloat, kString };
  std::string name;
  Type type = Type::kString;
};

// data.*.stream: a source read as a stream of records, never loaded whole
// (docs/streaming_input.md). The coordinator plans each epoch as units of
// files (common/stream_plan.h); a closure reads its unit's
// records through a bounded prefetch queue and a seeded shuffle buffer.
struct StreamSpec {
  // csv with a `stream:` block, and every tfrecord source.
  bool enabled = false;
  // file: a unit is a whole file (TF's AutoShardPolicy.FILE); data: a range
  // of steps_per_closure x batch records within a file (DATA). data needs
  // files it can seek in: plain text or TFRecord, not gzip.
  enum class Shard { kFile, kData };
  Shard shard = Shard::kData;
  // Bytes of records read ahead of training, per closure.
  int64_t prefetch_bytes = int64_t{4} << 20;
  // Records in the seeded shuffle buffer (TF's shuffle(buffer_size)); 0 or
  // data.shuffle: false reads each unit in file order.
  int64_t shuffle_buffer = 1000;
  // A corrupt record (bad CRC, a field that does not parse): fail the
  // closure (and the job) naming it, or skip and count it.
  bool skip_corrupt = false;
};

struct DataSourceSpec {
  // idx (MNIST-style image/label files), csv, tfrecord (files of
  // tf.Example, always streamed: `columns` name its features, read as csv
  // columns are), or synthetic_ctr.
  std::string format = "idx";
  // idx
  std::string images;
  std::string labels;
  // csv: a header row (unless header: false) naming `columns` (in file
  // order, with their types);
  // quoted fields may hold separators. Relative paths are relative to the
  // reading process's working directory. A gzip file is decompressed as it
  // is read. `path` is the first (or only) file; `paths` lists every file
  // when the YAML gives a list (path: [a.tsv.gz, b.tsv.gz]): they are read
  // in order as one data set (rows numbered on across files). Empty
  // `paths` means `path` alone.
  // A streaming source's paths may be glob patterns (`*`, `?`, `[...]`),
  // expanded by the coordinator in sorted order (common/stream_plan.h).
  std::string path;
  std::vector<std::string> paths;
  std::vector<ColumnSpec> columns;
  StreamSpec stream;
  // csv: the field delimiter (one byte; "\t" for Criteo's TSV), and whether
  // the file starts with a header row (false: `columns` name the fields in
  // file order).
  char delimiter = ',';
  bool header = true;
  std::string label_column;
  // False when the source names no labels (idx without `labels`, csv
  // without `label`): rows to predict (psctl predict --data). A job trains
  // and evaluates only on labelled sources (CheckLabelled); an unlabelled
  // source loads with every label 0.
  bool labelled = true;
  // If set, label = (label_column value >= label_threshold); else the label
  // column holds the class index.
  bool has_label_threshold = false;
  double label_threshold = 0;
  // Numeric columns fed to the model as dense inputs, in this order, and
  // the transform of each (a missing entry is kNone): kLog1p gives
  // log(1 + max(x, 0)).
  // A missing value is 0 before the transform.
  enum class DenseTransform { kNone, kLog1p };
  std::vector<std::string> dense_columns;
  std::vector<DenseTransform> dense_transforms;
  // Holdout split of one file into train and eval: an example belongs to the
  // holdout part when a seeded hash of its row number falls below
  // `holdout_fraction`. `holdout_part` says which part this source reads.
  double holdout_fraction = 0;
  uint64_t holdout_seed = 0;
  bool holdout_part = false;
  // synthetic_ctr: seeded examples whose categorical ids follow a Zipf
  // distribution over [0, id_space); for benchmarks, not accuracy claims.
  int64_t num_examples = 0;
  int64_t id_space = 10'000'000;
  double zipf_exponent = 1.1;
  uint64_t seed = 1;
  // Use only the first `limit` examples; 0 = all.
  int64_t limit = 0;
};

struct DataSpec {
  DataSourceSpec train;
  DataSourceSpec eval;
  // The examples of one replica's step, and of one step of all replicas:
  // global_batch = per_replica_batch x replicas (JobSpec::replicas). The
  // YAML gives at most one of them (neither: per_replica_batch 64);
  // ResolveReplicas derives the other. Until then the one not given is 0.
  int64_t per_replica_batch = 64;
  int64_t global_batch = 0;
  bool global_batch_given = false;
  bool shuffle = true;
};

struct TrainSpec {
  int64_t epochs = 1;
  int64_t steps_per_closure = 20;
  // Closures dispatched to one worker at a time (TF allows only one).
  int64_t closures_per_worker = 2;
  // Closures sent to a worker in one round trip (RunClosures); each is still
  // retried on its own. 1 (default) is one RunClosure RPC per closure; more
  // pays off only when a closure costs less than an RPC.
  int64_t closures_per_rpc = 1;
  // Bounded staleness (ps-lite's bounded delay; docs/staleness.md) of a
  // parameter_server job's training closures, numbered in the order the
  // coordinator queues them: closure k starts only once every closure
  // numbered below k - max_staleness has finished, so each closure starts
  // with at most max_staleness earlier closures unfinished (its measured
  // staleness). 0 runs the closures one after another; -1 (absent):
  // unbounded. In [0, JobLimits::kMaxStaleness] when given. Other strategies
  // have no stale closures and ignore it.
  int64_t max_staleness = -1;
  // Staleness-aware learning rates (Zhang et al. 2016): kInverse makes the
  // PS apply each push at lr / max(1, s), s the pushes it applied to the
  // job between the step's pull and this push (the push carries the
  // version its gradient was computed on).
  enum class StalenessLr { kNone, kInverse };
  StalenessLr staleness_lr = StalenessLr::kNone;
};

struct CheckpointSpec {
  // Where checkpoints and the job log live (a file system every PS and the
  // coordinator share). Empty: no checkpoints.
  std::string dir;
  // Take one after this many training steps (0: never by steps) and/or this
  // many seconds (0: never by time); always one at the end of the job.
  int64_t every_steps = 0;
  double every_seconds = 0;
  // Committed checkpoints kept; older ones are deleted.
  int64_t keep = 3;
  // A checkpoint that cannot be written (disk full, directory gone, I/O
  // error) is retried up to `max_retries` times; retry n waits at least
  // retry_backoff_s * 2^(n-1) seconds and for the next checkpoint trigger,
  // while training goes on. After the last retry fails: kContinue runs on
  // without new checkpoints (and no final one; the status says so), kFail
  // fails the job with the error.
  enum class OnFailure { kContinue, kFail };
  OnFailure on_failure = OnFailure::kContinue;
  int64_t max_retries = 3;
  double retry_backoff_s = 1;
};

// summaries: TensorBoard event files of the job, written by the coordinator
// (coordinator/core/job_summaries.h has the tags).
struct SummarySpec {
  // The directory of the event files (`tensorboard --logdir` it), confined
  // to the coordinator's checkpoint root as checkpoint.dir is: relative to
  // the root, or absolute under it (common/job_paths.h, ResolveSummaryDir).
  // Empty: no summaries.
  std::string logdir;
  // The training loss (and learning rate, throughput) every this many
  // training steps, at the end of the first closure that reaches them; 0:
  // once per epoch only. Eval metrics, per-PS bytes and checkpoints are
  // written when they happen.
  int64_t every_steps = 100;
};

// eval: where the job's evaluation runs (README "Evaluation").
struct EvalSpec {
  // kInline (default): the coordinator evaluates data.eval after every
  // epoch, as before. kSidecar: the coordinator runs no eval; a sidecar
  // `evaluator` process (evaluator/) evaluates each committed checkpoint
  // (needs checkpoint.dir). kNone: no evaluation at all. With kSidecar and
  // kNone the job's status and result carry no eval metrics.
  enum class Mode { kInline, kSidecar, kNone };
  Mode mode = Mode::kInline;
  // keep_best: the sidecar evaluator keeps a copy of the best checkpoint so
  // far by `metric` under <checkpoint.dir>/best/ (evaluator/core/best_checkpoint.h).
  // Sidecar only.
  enum class Metric { kLoss, kAccuracy, kAuc };
  bool keep_best = false;
  Metric metric = Metric::kLoss;
  // true: a larger value is better (mode: max; the default for accuracy and
  // auc), false: smaller (mode: min; the default for loss).
  bool maximize = false;
};

// "inline", "sidecar", "none"; "loss", "accuracy", "auc".
const char* EvalModeName(EvalSpec::Mode m);
const char* EvalMetricName(EvalSpec::Metric m);

struct FaultToleranceSpec {
  // Runs of one closure before the job fails.
  int64_t max_attempts = 5;
  // How long the coordinator waits for a failed PS to come back before it
  // fails the job.
  double ps_recovery_timeout_s = 60;
  // How often the coordinator checks the health of PS tasks and workers.
  double health_check_interval_s = 0.5;
  // A worker that has failed every health check for this long (hung, e.g.
  // SIGSTOPped, or cut off) is declared lost: its closures in flight are
  // cancelled and run on other workers, and it gets no work until it answers
  // again. Must be > health_check_interval_s, <= JobLimits::kMaxWorkerTimeoutS.
  double worker_timeout_s = 3;
};

struct JobSpec {
  std::string name;
  Strategy strategy = Strategy::kParameterServer;
  DevicePreference device = DevicePreference::kAuto;
  // Replicas in each worker process (mirrored: in the process), each
  // training on per_replica_batch examples of every step on its own thread
  // and backend; their gradients are averaged in the process before one
  // push. In [1, JobLimits::kMaxDevices]; one_device takes 1 only.
  int64_t devices = 1;
  uint64_t seed = 1;
  ModelSpec model;
  OptimizerProto optimizer;
  // How variables are split along axis 0 over the PS tasks (TF's rules).
  PartitionerSpec partitioner;
  DataSpec data;
  TrainSpec train;
  CheckpointSpec checkpoint;
  SummarySpec summaries;
  EvalSpec eval;
  FaultToleranceSpec fault_tolerance;
  // The YAML this spec was parsed from; workers receive it verbatim.
  std::string yaml;
  // optimizer.learning_rate as the YAML gives it: `optimizer` holds it
  // (learning_rate, and a schedule when it is a mapping) scaled for the
  // replicas by ResolveReplicas, this the unscaled one.
  OptimizerProto base_optimizer;
  // scale_with_replicas: linear: every rate from the peak on is multiplied
  // by `replicas` (Goyal et al.'s linear scaling rule, with warmup).
  bool scale_lr_with_replicas = false;
  // The replicas the batches and learning rate were resolved for
  // (ResolveReplicas); 0 until then.
  int64_t replicas = 0;
};

// The replicas of a job run on `workers` workers: one per worker for
// parameter_server (each worker trains on its own batch, as TF's
// ParameterServerStrategy with one device per worker) and central_storage
// (each worker trains on its slice of every global batch), 1 for one_device.
int64_t ReplicasFor(const JobSpec& spec, int64_t workers);

// Examples of one step of one worker: per_replica_batch x devices, or for
// a synchronous strategy the global batch (every worker steps through it, training
// on its slice). REQUIRES: the spec is resolved (ResolveReplicas).
int64_t StepExamples(const JobSpec& spec);
// A synchronous strategy: the shares of each step (one per worker:
// replicas / devices).
int64_t SyncShares(const JobSpec& spec);

// Resolves the parts of `spec` that depend on the replica count: derives
// per_replica_batch from data.global_batch (or global_batch from
// per_replica_batch), and applies scale_with_replicas to `optimizer`. May be
// called again with another count (it starts from what the YAML gave).
// INVALID_ARGUMENT: replicas outside [1, JobLimits::kMaxReplicas]; a
// global_batch that does not divide evenly by the replicas (the message
// names both numbers) or gives a per-replica batch over
// JobLimits::kMaxBatch; a layer's activations over
// JobLimits::kMaxActivationElements at the per-replica batch.
absl::Status ResolveReplicas(int64_t replicas, JobSpec* spec);

// Parses and validates a job spec. `filename` only names the source in error
// messages. Returns INVALID_ARGUMENT "filename:line:column: message" for
// malformed YAML, unknown keys, wrong types and out-of-range values.
absl::StatusOr<JobSpec> ParseJobSpec(const std::string& yaml_text, const std::string& filename);

// Reads `path` and parses it. NOT_FOUND if the file cannot be read.
absl::StatusOr<JobSpec> LoadJobSpec(const std::string& path);

// OK when `spec` can train: data.train is labelled, and so is data.eval
// unless the job's eval is `none` (a sidecar evaluator reads data.eval's
// labels too). INVALID_ARGUMENT naming the source otherwise: unlabelled
// sources are for psctl predict --data.
absl::Status CheckLabelled(const JobSpec& spec);

// The files the job's data sources read (idx images/labels, csv paths), for
// checking up front that they exist.
std::vector<std::string> DataFiles(const JobSpec& spec);

// A data file with the spec field that names it ("data.train.images").
struct NamedDataFile {
  std::string field;
  std::string path;
};
// The same files as DataFiles, each with its field.
std::vector<NamedDataFile> NamedDataFiles(const JobSpec& spec);

// "parameter_server", "one_device", "central_storage", "mirrored",
// "multi_worker_mirrored".
const char* StrategyName(Strategy s);
const char* DeviceName(DevicePreference d);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_JOB_SPEC_H_
