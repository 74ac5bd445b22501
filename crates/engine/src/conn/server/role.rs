//! What the daemon does in a session it accepted: send (a pull, or a
//! perf test the server sends) or receive (a push, or a perf test the
//! client sends), from a source or into a sink beneath its root, within
//! what the client's authorization grants.

use super::*;

pub(super) enum Role {
    Send(Arc<dyn Source>, Option<Duration>),
    Receive(Arc<dyn Sink>),
}

impl Role {
    /// A delegated push's receiving end takes only `names` (the
    /// delegation's sources): the pushing end chooses what it announces,
    /// and is guarded as a pull guards its own server.
    pub(super) fn receiving_only(self, names: Option<crate::store::expect::Requested>) -> Role {
        match (self, names) {
            (Role::Receive(sink), Some(names)) => Role::Receive(Arc::new(
                crate::store::expect::GuardedSink::new(sink, names),
            )),
            (role, _) => role,
        }
    }
}

pub(super) fn prepare_role(
    ctx: &Context,
    open: &SessionOpen,
    authz: &Authorization,
) -> Result<Role> {
    let grants = match authz {
        Authorization::Open => None,
        Authorization::Granted(g) => Some(g),
        Authorization::Denied(subject) => {
            return Err(Error::PermissionDenied {
                path: subject.clone(),
                why: "this certificate is not authorized on this server".into(),
            });
        }
    };
    // The root a request is served from, and the path beneath it: with
    // grants, the subtree of the grant it falls in.
    let place = |path: PathBuf, access: Access| -> Result<(Root, PathBuf)> {
        match grants {
            None => Ok((ctx.root.clone(), path)),
            Some(g) => {
                let (grant, rest) = g.resolve(&path, access)?;
                Ok((ctx.root.subtree(&grant.path)?, rest))
            }
        }
    };
    Ok(match &open.mode {
        SessionMode::Push { dest, top_level } => {
            let dest = ctx.place(dest)?;
            // A writer who may not read is not told what is there already
            // (--skip-existing would say, and give digests).
            let readable = grants.is_none_or(|g| g.resolve(&dest, Access::Read).is_ok());
            let (root, dest) = place(dest, Access::Write)?;
            let sink =
                FsSink::new(root, dest, *top_level)?.keep_special_bits(ctx.opts.allow_special_bits);
            Role::Receive(Arc::new(if readable { sink } else { sink.blind() }))
        }
        SessionMode::Pull { sources, recursive } => {
            if sources.is_empty() {
                return Err(Error::BadRequest("no source paths".into()));
            }
            // All sources must lie in one grant: one source, one root.
            let mut grant_path: Option<PathBuf> = None;
            let mut paths = Vec::with_capacity(sources.len());
            for s in sources {
                let path = ctx.place(s)?;
                let Some(g) = grants else {
                    paths.push(path);
                    continue;
                };
                let (grant, rest) = g.resolve(&path, Access::Read)?;
                if grant_path.as_ref().is_some_and(|p| *p != grant.path) {
                    return Err(Error::BadRequest(
                        "the sources lie in different grants; copy them separately".into(),
                    ));
                }
                grant_path = Some(grant.path.clone());
                paths.push(rest);
            }
            let root = match &grant_path {
                Some(sub) => ctx.root.subtree(sub)?,
                None => ctx.root.clone(),
            };
            let source = FsSource::new(root, paths, *recursive)
                .keep_special_bits(ctx.opts.allow_special_bits);
            Role::Send(Arc::new(source), None)
        }
        SessionMode::Perf {
            server_sends,
            bytes,
            millis,
        } => {
            if *server_sends {
                let (size, deadline) = if *bytes > 0 {
                    (*bytes, None)
                } else {
                    (FileMeta::UNKNOWN_SIZE, Some(Duration::from_millis(*millis)))
                };
                Role::Send(Arc::new(GenSource::new(size, open.block_size)), deadline)
            } else {
                Role::Receive(Arc::new(DiscardSink))
            }
        }
    })
}

/// A session's parameters, from its agreed request.
pub(super) fn params_of(request: &SessionRequest, block_check: BlockCheck) -> TransferParams {
    let open = &request.open;
    let mut params = TransferParams::new(open.streams, open.block_size, open.checksum);
    params.max_streams = request.tuning.max_streams;
    params.tuning = tuning_of(request);
    params.block_check = block_check;
    params.resume = request.features.contains(tern_proto::Features::RESUME);
    params.entries = request.features.contains(tern_proto::Features::ENTRIES);
    params.take_path_rate = request.features.contains(tern_proto::Features::PATH_RATE);
    params.apply_agreed(&request.options);
    params.limit_files_in_flight(request.features);
    params
}

/// Runs the daemon's end of an accepted session.
pub(super) async fn run_role(
    ctx: &Context,
    role: Role,
    control: Control,
    streams: FirstStreams,
    supply: StreamSupply,
    mut params: TransferParams,
    progress: Arc<Progress>,
) -> Result<transfer::TransferStats> {
    match role {
        Role::Send(source, deadline) => {
            params.deadline = deadline.map(|d| Instant::now() + d);
            params.tuning.script = ctx.opts.stream_script.clone();
            transfer::run_sender(control, streams, supply, source, params, progress).await
        }
        Role::Receive(sink) => {
            transfer::run_receiver(control, streams, supply, sink, params, progress).await
        }
    }
}
