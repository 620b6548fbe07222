//! The runtime the all-in-one writes clicks on: its own thread in Linux's `SCHED_IDLE`
//! class, so rollup writes only use CPU the redirects leave idle; and the CPU time its
//! threads spend, which paces the writes ([`ThreadsCpu`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The runtime the click writes run on, and the CPU time of its threads when they are its
/// own (none: a runtime shared with other work, whose writes are paced by their wall time).
pub struct LowPriority {
    pub runtime: tokio::runtime::Handle,
    pub cpu: Option<ThreadsCpu>,
}

/// A runtime on its own thread at the lowest CPU priority (`SCHED_IDLE`, inherited by the
/// threads its blocking pool starts): click rollup writes run there, so under load they
/// take only CPU time the redirect threads leave idle. The thread lives as long as the
/// process.
pub fn low_priority_runtime(name: &str) -> std::io::Result<LowPriority> {
    let (tx, rx) = std::sync::mpsc::channel();
    let thread_name = name.to_owned();
    let cpu = ThreadsCpu::default();
    let (on_start, on_stop, on_runtime) = (cpu.clone(), cpu.clone(), cpu.clone());
    std::thread::Builder::new().name(name.to_owned()).spawn(move || {
        lower_this_threads_priority();
        on_runtime.enter();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name(thread_name)
            .max_blocking_threads(2)
            .on_thread_start(move || on_start.enter())
            .on_thread_stop(move || on_stop.leave())
            .build();
        match runtime {
            Ok(runtime) => {
                let _ = tx.send(Ok(runtime.handle().clone()));
                runtime.block_on(std::future::pending::<()>());
            }
            Err(e) => {
                let _ = tx.send(Err(e));
            }
        }
    })?;
    let runtime = rx.recv().map_err(std::io::Error::other)??;
    Ok(LowPriority {
        runtime,
        cpu: Some(cpu),
    })
}

/// The CPU time a set of threads spent, as Linux counts it (`/proc/.../schedstat`): those
/// that entered it and are still running, plus those that left. The click writes are paced
/// by it (`click_write_share`), not by their wall time: at `SCHED_IDLE` on a machine whose
/// CPU others take, a write waits for the CPU far longer than it runs, and by its wall time
/// held the next write off up to the longest hold (60 s) even once the machine was idle
/// again (`benches/results/2026-12-07o-breakdown-lag.md`).
#[derive(Clone, Default)]
pub struct ThreadsCpu(Arc<Mutex<Threads>>);

#[derive(Default)]
struct Threads {
    /// The Linux thread ids of the threads running.
    running: Vec<u32>,
    /// The CPU time of those that left.
    left: Duration,
    /// A thread whose time could not be read entered or left: the sum would miss it.
    unknown: bool,
}

impl ThreadsCpu {
    /// Counts the calling thread in from now on (all it spent before counts too).
    pub fn enter(&self) {
        self.entered(this_thread_id());
    }

    fn entered(&self, tid: Option<u32>) {
        let mut threads = self.threads();
        match tid {
            Some(tid) => threads.running.push(tid),
            None => threads.unknown = true,
        }
    }

    /// Counts the calling thread out, keeping what it spent: it is about to end.
    pub fn leave(&self) {
        let (tid, spent) = (this_thread_id(), cpu_of("/proc/thread-self/schedstat"));
        let mut threads = self.threads();
        threads.running.retain(|&t| Some(t) != tid);
        match spent {
            Some(spent) => threads.left += spent,
            None => threads.unknown = true,
        }
    }

    /// The CPU time spent so far; none where Linux does not say (another OS, no `/proc`):
    /// the writes are then paced by their wall time.
    pub fn spent(&self) -> Option<Duration> {
        let threads = self.threads();
        if threads.unknown {
            return None;
        }
        let mut spent = threads.left;
        for tid in &threads.running {
            spent += cpu_of(&format!("/proc/self/task/{tid}/schedstat"))?;
        }
        Some(spent)
    }

    fn threads(&self) -> std::sync::MutexGuard<'_, Threads> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The calling thread's Linux thread id: `/proc/thread-self` links to `<pid>/task/<tid>`.
fn this_thread_id() -> Option<u32> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?.to_str()?.parse().ok()
}

/// A thread's time on a CPU: the first field of its `schedstat`, in nanoseconds.
fn cpu_of(schedstat: &str) -> Option<Duration> {
    let text = std::fs::read_to_string(schedstat).ok()?;
    let nanos = text.split_ascii_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(nanos))
}

/// Puts the calling thread in Linux's `SCHED_IDLE` class: it runs only when a core has
/// nothing else to run, and a waking redirect thread preempts it at once (a low nice value
/// alone still lets it finish a time slice first). Threads it creates inherit the class.
/// Failing is harmless: writes then compete as equals.
fn lower_this_threads_priority() {
    #[cfg(target_os = "linux")]
    {
        use thread_priority::unix::{
            set_thread_priority_and_policy, thread_native_id, NormalThreadSchedulePolicy, ThreadSchedulePolicy,
        };
        let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
        if let Err(e) = set_thread_priority_and_policy(thread_native_id(), thread_priority::ThreadPriority::Min, idle) {
            tracing::debug!(error = ?e, "could not lower the click writer's priority");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_writer_runtime_and_its_blocking_threads_run_only_when_a_core_is_idle() {
        use thread_priority::unix::{thread_schedule_policy, NormalThreadSchedulePolicy, ThreadSchedulePolicy};
        let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
        let runtime = low_priority_runtime("clicks-test").unwrap().runtime;
        let (on_runtime, on_blocking) = runtime
            .spawn(async {
                let here = thread_schedule_policy().unwrap();
                let blocking = tokio::task::spawn_blocking(|| thread_schedule_policy().unwrap())
                    .await
                    .unwrap();
                (here, blocking)
            })
            .await
            .unwrap();
        assert_eq!(on_runtime, idle);
        assert_eq!(on_blocking, idle, "the SQLite writes run on the blocking pool");
        assert_ne!(thread_schedule_policy().unwrap(), idle, "the caller keeps its class");
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_writer_threads_cpu_time_counts_their_work_not_their_waits() {
        use std::time::Duration;
        let LowPriority { runtime, cpu } = low_priority_runtime("clicks-cpu-test").unwrap();
        let cpu = cpu.unwrap();
        let mine = || cpu_of("/proc/thread-self/schedstat").unwrap();
        let before = cpu.spent().unwrap();
        // 400 ms asleep, on the runtime's thread and on its blocking pool's.
        runtime
            .spawn(async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(200)))
                    .await
                    .unwrap();
            })
            .await
            .unwrap();
        let asleep = cpu.spent().unwrap() - before;
        // Work on the blocking pool, until its thread has spent 50 ms on a CPU.
        runtime
            .spawn(async move {
                tokio::task::spawn_blocking(move || {
                    let start = mine();
                    while mine() - start < Duration::from_millis(50) {
                        std::hint::black_box(0);
                    }
                })
                .await
                .unwrap();
            })
            .await
            .unwrap();
        let worked = cpu.spent().unwrap() - before - asleep;
        assert!(worked >= Duration::from_millis(50), "{worked:?}");
        assert!(
            asleep < Duration::from_millis(100),
            "{asleep:?} of CPU for 400 ms asleep"
        );
        // The caller's own work is not the writer's.
        let start = mine();
        while mine() - start < Duration::from_millis(50) {
            std::hint::black_box(0);
        }
        let after = cpu.spent().unwrap() - before - asleep - worked;
        assert!(after < Duration::from_millis(25), "{after:?}");
    }

    #[test]
    fn a_thread_whose_time_cannot_be_read_leaves_the_sum_unknown() {
        let cpu = ThreadsCpu::default();
        cpu.enter();
        assert!(cpu.spent().is_some());
        cpu.entered(None);
        assert_eq!(cpu.spent(), None, "a sum that misses a thread paces by wall time");
    }
}
