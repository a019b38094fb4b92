//! The write-ahead log: the durable queue of accepted events. (Being written.)
//!
//! CONTRACT used by the rest of the crate (sched, main):
//!
//! ```ignore
//! pub type Lsn = u64;
//! pub struct EventRecord { pub event_id: String, pub trigger_id: String, pub source: String,
//!                          pub received_at_ms: u64, pub headers: Vec<(String, Vec<u8>)>, pub body: Vec<u8> }
//! pub enum Durability { Fsync, Os }
//! pub struct WalConfig { pub dir: PathBuf /* DATA_DIR/wal */, pub segment_bytes: u64, pub durability: Durability,
//!                        pub write_path: WritePath /* Pwrite | Mmap */, pub max_batch: usize }
//! pub struct AppendRequest { pub worker: usize, pub ticket: u64, pub event: EventRecord }
//! pub enum AppendOutcome { Durable { lsn: Lsn }, Unavailable }
//! pub trait CompletionSink: Send { fn complete(&mut self, ticket: u64, outcome: AppendOutcome); fn notify(&mut self); }
//! pub struct WalShared { durable_lsn: AtomicU64, healthy: AtomicBool, appends: AtomicU64, sync histogram ... }
//! pub fn open(cfg: &WalConfig) -> Result<(Wal, RecoveryReport), WalError>;   // recovery: CRC check, torn tail truncation
//! pub fn spawn_writer(wal: Wal, rx: ring::Receiver<AppendRequest>, parker: Parker,
//!                     sinks: Vec<Box<dyn CompletionSink>>, shared: Arc<WalShared>) -> io::Result<JoinHandle<()>>;
//! pub mod tools { pub fn verify(data_dir) -> Result<VerifyReport, WalError>; pub fn inspect_json(data_dir, out: &mut dyn Write) -> Result<(), WalError>; }
//! ```
