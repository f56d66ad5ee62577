//! Several GPUs as one: a [`Pool`] of runtimes, one per device, with
//! routing and failure isolation.

mod numa;

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::runtime::inflight::InFlight;
use crate::runtime::submit::{Room, Submission, Submit, sealed};
use crate::runtime::{Builder, DeviceBuffer, Lane, Runtime};
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// How a [`Pool`] picks the device of a task it routes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Routing {
    /// The serving device with the fewest tasks in flight, as the pool
    /// counts them: the tasks of tickets and batches it handed out that
    /// were neither read nor dropped (a batch counts all its tasks until
    /// its last is taken; work submitted straight to a device's runtime,
    /// or whose handle was dropped, is not counted).
    #[default]
    LeastLoaded,
    /// Of two serving devices picked at random, the less loaded: almost as
    /// even as `LeastLoaded` with many devices, reading two loads a task.
    PowerOfTwo,
    /// The serving devices in turn.
    RoundRobin,
}

/// Configures and starts a [`Pool`].
#[derive(Clone, Debug)]
#[must_use = "a builder starts nothing until `build` is called"]
pub struct PoolBuilder {
    devices: Option<Vec<usize>>,
    runtime: Builder,
    routing: Routing,
}

/// A set of a pool's members by index (bit i: member i), for the
/// devices one submit found held: a pool has at most [`MAX_POOL_DEVICES`].
type Held = u128;

/// The most devices a pool has.
pub const MAX_POOL_DEVICES: usize = Held::BITS as usize;

/// One device of a pool.
struct Member {
    device: usize,
    rt: Runtime,
    /// Tasks in flight (see [`InFlight`]).
    load: Arc<AtomicUsize>,
    /// Cleared when the device faulted or stopped: routing skips it.
    serving: AtomicBool,
    numa_node: Option<usize>,
}

/// Runtimes on several devices behind one submit ([`Submit`]): each device
/// has its own resident kernel, context, pinned memory and rings (a
/// [`Runtime`] each, from one [`Builder`] template), and the pool routes
/// each submit to one of them ([`Routing`], or by key with [`Pool::keyed`]),
/// counting the tasks of every ticket and batch it hands out in that
/// device's load. A submit refuses what a runtime's refuses (for a task of
/// its own, such as a payload too large, without trying another device),
/// a task marked [`Task::unchecked`](crate::Task::unchecked) whose handler
/// may dereference device addresses (they are one device's: submit it to
/// [`Pool::for_buffer`] or [`Pool::runtime`]; [`Error::InvalidArgument`]),
/// and [`Error::NoServingDevice`] once no device serves (before the task's
/// own checks, which a serving device's runtime makes). A device that
/// faults or stops is taken out: its tickets report the error
/// ([`Error::DeviceFault`], ...), the pool routes to the others, and
/// [`Pool::serving`] lists those left. (The driver reports a fault on every
/// device of the process; the others' runtimes serve on, their kernels
/// beating, but calls of theirs that need the driver fail from then on.)
/// Tasks that use a device's buffers go to that device's runtime
/// ([`Pool::for_buffer`]); naming another device's buffers is refused,
/// never copied.
///
/// A device whose ring a thread submits to is held by an
/// [`ExclusiveProducer`](crate::ExclusiveProducer) (taken through
/// [`Pool::runtime`]) is passed over by that thread's routed submits (the
/// routing chooses among the other serving devices), which return
/// [`Error::RingHeld`] only where every serving device's ring is held; a
/// keyed submit stays on its key's device and returns it.
///
/// Where the host has several NUMA nodes, each device's runtime is built on
/// a thread pinned to the CPUs of the node its PCI slot hangs off (so its
/// pinned memory is allocated there) and its completion thread is pinned
/// there too; on a host of one node ([`Pool::numa_nodes`]) nothing is
/// placed.
///
/// ```no_run
/// # fn main() -> pkq::Result<()> {
/// use pkq::{Pool, Routing, Submit, builtin::ECHO};
/// let pool = Pool::builder().routing(Routing::PowerOfTwo).build()?; // every device
/// let t = pool.submit(ECHO.args(&7))?;
/// assert_eq!(t.wait()?.value, 7);
/// let same = pool.keyed(42).submit(ECHO.args(&1))?; // key 42: always one device
/// same.wait()?;
/// println!("serving: {:?}", pool.serving());
/// # Ok(()) }
/// ```
pub struct Pool {
    members: Box<[Member]>,
    routing: Routing,
    next: AtomicUsize,
    rng: AtomicU64,
    nodes: usize,
}

/// Refuses a pool's device list: empty, an index named twice, or more
/// than [`MAX_POOL_DEVICES`] ([`Error::InvalidConfig`]).
fn check_devices(devices: &[usize]) -> Result<()> {
    if devices.is_empty() {
        return Err(Error::InvalidConfig(
            "a pool needs at least one device".into(),
        ));
    }
    if devices.len() > MAX_POOL_DEVICES {
        return Err(Error::InvalidConfig(format!(
            "a pool has at most {MAX_POOL_DEVICES} devices (got {})",
            devices.len()
        )));
    }
    for (i, d) in devices.iter().enumerate() {
        if devices[..i].contains(d) {
            return Err(Error::InvalidConfig(format!("device {d} is named twice")));
        }
    }
    Ok(())
}

impl Default for PoolBuilder {
    fn default() -> Self {
        Self {
            devices: None,
            runtime: Runtime::builder(),
            routing: Routing::default(),
        }
    }
}

impl PoolBuilder {
    /// The devices (default: every device the driver reports). Each index
    /// once, at most [`MAX_POOL_DEVICES`]; an empty list, a repeated or absent
    /// index is refused at build.
    pub fn devices(mut self, devices: &[usize]) -> Self {
        self.devices = Some(devices.to_vec());
        self
    }

    /// The settings of every device's runtime (its device is the pool's
    /// choice: a device set here is ignored).
    pub fn runtime_builder(mut self, builder: Builder) -> Self {
        self.runtime = builder;
        self
    }

    /// How tasks are routed (default [`Routing::LeastLoaded`]).
    pub fn routing(mut self, routing: Routing) -> Self {
        self.routing = routing;
        self
    }

    /// Starts a runtime on every device. Errors: [`Error::InvalidConfig`]
    /// (no device, a device twice, more than [`MAX_POOL_DEVICES`], or a runtime
    /// setting out of range: the device list named is checked first),
    /// [`Error::DeviceOutOfRange`], and every error of
    /// [`Builder::build`]; the runtimes already started are stopped.
    pub fn build(self) -> Result<Pool> {
        // The list named, then what every runtime's build refuses before
        // the driver, refused before the pool asks it for the devices.
        if let Some(d) = &self.devices {
            check_devices(d)?;
        }
        self.runtime.check_before_driver()?;
        let devices = match self.devices {
            Some(d) => d,
            None => (0..crate::cuda::driver::device_count()?).collect(),
        };
        check_devices(&devices)?;
        let nodes = numa::nodes();
        let mut members = Vec::with_capacity(devices.len());
        for &device in &devices {
            let node = if nodes > 1 {
                crate::cuda::driver::pci_bus_id(device)
                    .ok()
                    .and_then(|id| numa::node_of(&id))
            } else {
                None
            };
            // The node's CPUs this process may run on (a cpuset or taskset
            // may leave none of them).
            let cpus: Vec<usize> = node
                .map(numa::cpus_of)
                .unwrap_or_default()
                .into_iter()
                .filter(|&c| crate::runtime::wait::pin::allowed(c))
                .collect();
            let mut b = self.runtime.clone().device(device);
            if b.completion_cpu.is_none() && !cpus.is_empty() {
                // Devices of one node spread over its CPUs, from the last
                // (the first often takes the system's interrupts).
                let on_node = members
                    .iter()
                    .filter(|m: &&Member| m.numa_node == node)
                    .count();
                b = b.completion_cpu(cpus[cpus.len() - 1 - on_node % cpus.len()]);
            }
            // Pinned memory goes where the allocating thread runs: build on
            // a thread of the device's node.
            let (rt, placed) = if cpus.is_empty() {
                (b.build()?, false)
            } else {
                std::thread::scope(|s| {
                    let here = b.clone();
                    let on_node = std::thread::Builder::new()
                        .name("pkq-pool-build".into())
                        .spawn_scoped(s, || {
                            let placed = crate::runtime::wait::pin::pin_to(&cpus);
                            b.build().map(|rt| (rt, placed))
                        });
                    match on_node {
                        Ok(thread) => thread.join().unwrap_or_else(|_| {
                            Err(Error::InvalidConfig("a build thread panicked".into()))
                        }),
                        // No thread to be had: built here, not placed.
                        Err(_) => here.build().map(|rt| (rt, false)),
                    }
                })?
            };
            members.push(Member {
                device,
                rt,
                load: Arc::new(AtomicUsize::new(0)),
                serving: AtomicBool::new(true),
                numa_node: node.filter(|_| placed),
            });
        }
        Ok(Pool {
            members: members.into_boxed_slice(),
            routing: self.routing,
            next: AtomicUsize::new(0),
            rng: AtomicU64::new(0x9e37_79b9_7f4a_7c15),
            nodes,
        })
    }
}

impl Pool {
    /// A builder: every device, the default runtime, least-loaded routing.
    pub fn builder() -> PoolBuilder {
        PoolBuilder::default()
    }

    /// The pool's devices, in the order given.
    pub fn devices(&self) -> Vec<usize> {
        self.members.iter().map(|m| m.device).collect()
    }

    /// The devices that still serve (a device that faulted or stopped is
    /// taken out when a submit, a route or [`Pool::health`] finds it so).
    pub fn serving(&self) -> Vec<usize> {
        self.members
            .iter()
            .filter(|m| self.still_serving(m))
            .map(|m| m.device)
            .collect()
    }

    /// The host's NUMA nodes as sysfs lists them (1 where it lists none).
    pub fn numa_nodes(&self) -> usize {
        self.nodes
    }

    /// The NUMA node device `device`'s runtime was placed on; `None` on a
    /// host of one node, or where sysfs does not say.
    pub fn numa_node(&self, device: usize) -> Option<usize> {
        self.member(device).ok().and_then(|m| m.numa_node)
    }

    /// The tasks in flight on `device` as [`Routing::LeastLoaded`] counts
    /// them; `None` for a device not in the pool.
    pub fn load(&self, device: usize) -> Option<usize> {
        self.member(device)
            .ok()
            .map(|m| m.load.load(Ordering::Relaxed))
    }

    /// Device `device`'s runtime, for anything the pool does not route
    /// (producers, lanes, device state). Tasks submitted through it are
    /// not counted in the pool's loads. Errors: [`Error::InvalidArgument`]
    /// (not in the pool), [`Error::NotServing`].
    pub fn runtime(&self, device: usize) -> Result<&Runtime> {
        let m = self.member(device)?;
        if !self.still_serving(m) {
            return Err(Error::NotServing(device));
        }
        Ok(&m.rt)
    }

    /// The runtime of the device `buffer` lives on (a cudarc slice or view):
    /// a task that reads or writes it must run there. Errors:
    /// [`Error::InvalidArgument`] (its device is not in the pool),
    /// [`Error::NotServing`].
    pub fn for_buffer<T>(&self, buffer: &impl DeviceBuffer<T>) -> Result<&Runtime> {
        self.runtime(buffer.stream().context().ordinal())
    }

    /// The submitter of `key`'s tasks ([`Submit`]): the same device for the
    /// same key while it serves (rendezvous hashing over the serving
    /// devices: a device taken out moves only its own keys), counted in its
    /// load. [`Error::RingHeld`] where an exclusive producer holds the ring
    /// this thread submits to on that device: the key does not move.
    ///
    /// ```no_run
    /// # fn main() -> pkq::Result<()> {
    /// use pkq::{Pool, Submit, builtin::ECHO};
    /// let pool = Pool::builder().build()?;
    /// let account = pool.keyed(42);
    /// let a = account.submit(ECHO.args(&1))?;
    /// let b = account.submit(ECHO.args(&2))?; // on a's device, while it serves
    /// assert_eq!(a.wait()?.value + b.wait()?.value, 3);
    /// # Ok(()) }
    /// ```
    pub fn keyed(&self, key: u64) -> Keyed<'_> {
        Keyed { pool: self, key }
    }

    /// The device of `key` ([`Pool::keyed`]'s choice).
    pub fn route_key(&self, key: u64) -> Result<usize> {
        self.keyed_member(key).map(|m| m.device)
    }

    /// Probes every device's runtime now (its lane 0, which the pool routes
    /// to) and takes out those that faulted or stopped; `Ok` while one
    /// serves, else [`Error::NoServingDevice`].
    pub fn health(&self) -> Result<()> {
        for m in self.members.iter() {
            // Lane 0 is what the pool routes to.
            if let Err(e) = Lane::health(&m.rt)
                && !matches!(e, Error::Stalled { .. })
            {
                m.serving.store(false, Ordering::Relaxed);
            }
        }
        if self.serving().is_empty() {
            return Err(Error::NoServingDevice);
        }
        Ok(())
    }

    /// Shuts every device's runtime down ([`Runtime::shutdown`]); the first
    /// error, after all were asked.
    pub fn shutdown(&self) -> Result<()> {
        let outcomes: Vec<Result<()>> = self.members.iter().map(|m| m.rt.shutdown()).collect();
        outcomes.into_iter().collect()
    }

    fn member(&self, device: usize) -> Result<&Member> {
        self.members
            .iter()
            .find(|m| m.device == device)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "device {device} is not in the pool (devices {:?})",
                    self.devices()
                ))
            })
    }

    /// Whether `m` serves; a device whose runtime latched a fault or a stop
    /// is taken out here.
    fn still_serving(&self, m: &Member) -> bool {
        if !m.serving.load(Ordering::Relaxed) {
            return false;
        }
        // A fault or stop latched, or a shutdown begun (it latches nothing
        // until the kernel exits).
        if m.rt.shared.check().is_err() || m.rt.shared.is_closed() {
            m.serving.store(false, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Submits with `submit` to the routed device, counting `n` tasks in
    /// its load (`count` attaches the load to what was submitted); a device
    /// found dead is taken out and the next one tried, and a device whose
    /// ring this thread finds held is passed over for this submit, the
    /// routing choosing among the rest.
    fn routed<T>(
        &self,
        n: usize,
        submit: impl Fn(&Runtime) -> Result<T>,
        count: impl Fn(T, InFlight) -> T,
    ) -> Result<T> {
        // Bit i: member i refused this submit with `RingHeld`.
        let mut held: Held = 0;
        // This submit's turn, drawn once (`pick`).
        let mut turn = None;
        loop {
            let (i, m) = self.pick(held, &mut turn)?;
            match submit(&m.rt) {
                Ok(t) => return Ok(count(t, InFlight::add(&m.load, n))),
                // The device serves, but an exclusive producer holds the
                // ring this thread submits to there: another may take it.
                Err(Error::RingHeld) if self.still_serving(m) => held |= 1 << i,
                Err(e) => self.after_failure(m, e)?,
            }
        }
    }

    /// After a submit to `m` failed with `e`: `Ok` to try another device
    /// (`m` was found dead and taken out), else the error (the task's own,
    /// such as a payload too large: another device would refuse it too).
    fn after_failure(&self, m: &Member, e: Error) -> Result<()> {
        if self.still_serving(m) {
            return Err(e);
        }
        if self.serving().is_empty() {
            return Err(Error::NoServingDevice);
        }
        Ok(())
    }

    /// The routed device and its index (no allocation: this is on every
    /// submit), among the serving devices not in `held` (bit i: member i);
    /// [`Error::RingHeld`] where every serving device is. `turn`: the
    /// submit's place in the rotation, drawn at its first pick and kept for
    /// the next, so that a device passed over does not move the rotation on
    /// twice.
    fn pick(&self, held: Held, turn: &mut Option<usize>) -> Result<(usize, &Member)> {
        let load = |m: &Member| m.load.load(Ordering::Relaxed);
        // The serving devices (those found dead are taken out here).
        let serving = self
            .members
            .iter()
            .filter(|m| self.still_serving(m))
            .count();
        if serving == 0 {
            return Err(Error::NoServingDevice);
        }
        // Those this submit may go to, in member order.
        let open = || {
            self.members
                .iter()
                .enumerate()
                .filter(move |(i, m)| held >> i & 1 == 0 && m.serving.load(Ordering::Relaxed))
        };
        let left = open().count();
        if left == 0 {
            return Err(Error::RingHeld);
        }
        if left == 1 {
            return open().next().ok_or(Error::NoServingDevice);
        }
        if self.routing == Routing::PowerOfTwo {
            let r = self.random();
            let i = (r % left as u64) as usize;
            // Two different devices.
            let j = (i + 1 + ((r >> 32) % (left as u64 - 1)) as usize) % left;
            // (One taken out meanwhile: the least loaded of those left.)
            if let (Some(a), Some(b)) = (open().nth(i), open().nth(j)) {
                return Ok(if load(b.1) < load(a.1) { b } else { a });
            }
        }
        // The devices in turn, from a rotating start among them (so that
        // ties go round the devices, whichever are out).
        let start = *turn.get_or_insert_with(|| self.next.fetch_add(1, Ordering::Relaxed)) % left;
        let mut turn = open().cycle().skip(start).take(left);
        if self.routing == Routing::RoundRobin {
            return turn.next().ok_or(Error::NoServingDevice);
        }
        let mut best: Option<(usize, &Member)> = None;
        for m in turn {
            if best.is_none_or(|b| load(m.1) < load(b.1)) {
                best = Some(m);
            }
        }
        best.ok_or(Error::NoServingDevice)
    }

    /// The serving device of `key` by rendezvous hashing.
    fn keyed_member(&self, key: u64) -> Result<&Member> {
        self.members
            .iter()
            .filter(|m| self.still_serving(m))
            .max_by_key(|m| mix(key ^ mix(m.device as u64 + 1)))
            .ok_or(Error::NoServingDevice)
    }

    /// A random word (xorshift; relaxed races only repeat a value).
    fn random(&self) -> u64 {
        let mut x = self.rng.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.store(x, Ordering::Relaxed);
        x
    }
}

impl sealed::Route for Pool {}
/// A pool submits to the device its [`Routing`] picks (a device found dead
/// is taken out and the next tried), and counts the tasks in that device's
/// load until they are read.
impl Submit for Pool {
    fn route<T: Submission>(&self, task: T, room: Room) -> Result<T::Handle> {
        refuse_unchecked(&task)?;
        self.routed(task.tasks(), |rt| rt.route(task, room), T::held)
    }
}

/// A pool routes no task marked unchecked whose handler may dereference
/// device addresses: they belong to one device, which routing does not
/// know ([`Error::InvalidArgument`]).
fn refuse_unchecked<T: Submission>(task: &T) -> Result<()> {
    match task.unchecked_op() {
        Some(op) => Err(Error::InvalidArgument(format!(
            "a pool routes no unchecked task ({op} may dereference device addresses, which are \
             one device's): submit it to that device's runtime (Pool::for_buffer, Pool::runtime)"
        ))),
        None => Ok(()),
    }
}

/// The submitter of one key's tasks ([`Pool::keyed`]).
#[derive(Clone, Copy, Debug)]
pub struct Keyed<'p> {
    pool: &'p Pool,
    key: u64,
}

impl Keyed<'_> {
    /// The device of the key now ([`Pool::route_key`]).
    pub fn device(&self) -> Result<usize> {
        self.pool.route_key(self.key)
    }
}

impl sealed::Route for Keyed<'_> {}
/// A key's tasks go to the key's device while it serves, counted in its
/// load.
impl Submit for Keyed<'_> {
    fn route<T: Submission>(&self, task: T, room: Room) -> Result<T::Handle> {
        refuse_unchecked(&task)?;
        loop {
            let m = self.pool.keyed_member(self.key)?;
            match m.rt.route(task, room) {
                Ok(t) => return Ok(T::held(t, InFlight::add(&m.load, task.tasks()))),
                Err(e) => self.pool.after_failure(m, e)?,
            }
        }
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("devices", &self.devices())
            .field("serving", &self.serving())
            .field("routing", &self.routing)
            .finish()
    }
}

/// A 64-bit mix (splitmix64's finalizer).
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
impl Pool {
    /// A pool over runtimes already built (the software device's, in tests).
    fn of(runtimes: Vec<(usize, Runtime)>, routing: Routing) -> Self {
        Self {
            members: runtimes
                .into_iter()
                .map(|(device, rt)| Member {
                    device,
                    rt,
                    load: Arc::new(AtomicUsize::new(0)),
                    serving: AtomicBool::new(true),
                    numa_node: None,
                })
                .collect(),
            routing,
            next: AtomicUsize::new(0),
            rng: AtomicU64::new(0x9e37_79b9_7f4a_7c15),
            nodes: 1,
        }
    }
}
