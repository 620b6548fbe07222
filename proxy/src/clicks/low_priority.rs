//! The runtime the all-in-one writes clicks on: its own thread in Linux's `SCHED_IDLE`
//! class, so rollup writes only use CPU the redirects leave idle.

/// A runtime on its own thread at the lowest CPU priority (`SCHED_IDLE`, inherited by the
/// threads its blocking pool starts): click rollup writes run there, so under load they
/// take only CPU time the redirect threads leave idle. The thread lives as long as the
/// process.
pub fn low_priority_runtime(name: &str) -> std::io::Result<tokio::runtime::Handle> {
    let (tx, rx) = std::sync::mpsc::channel();
    let thread_name = name.to_owned();
    std::thread::Builder::new().name(name.to_owned()).spawn(move || {
        lower_this_threads_priority();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name(thread_name)
            .max_blocking_threads(2)
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
    rx.recv().map_err(std::io::Error::other)?
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
        let runtime = low_priority_runtime("clicks-test").unwrap();
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
}
