# Sourced by the containers suite's scripts: podman and buildah as they work on these machines,
# on storage of the suite's own, never the machine's default.
#   . tests/containers/podman-env.sh
# - Images and build layers persist under $SHUTDOWN_SHIM_CACHE/containers (default
#   /var/cache/shutdown-shim/containers), so that a warm run builds nothing that has not changed.
# - runc, not crun: crun 1.8 refuses the hybrid cgroups (v1 + a v2 hierarchy) of these machines.
# - default_ulimits: podman's default nofile (1048576) is above the hard limit here (20000), and
#   conmon allows no more than 32768 processes.
# - cgroupfs and a file events log: PID 1 is not systemd, there is no journal to log to.
# - Networking: the suite runs pods with hostNetwork (the manifests' own setting) or none, never
#   a bridge, which would leave iptables chains behind; the CNI configuration podman may write
#   goes to a directory of the suite's own.
containers_state=${SHUTDOWN_SHIM_CACHE:-/var/cache/shutdown-shim}/containers
containers_run=/run/shutdown-shim-tests/containers
mkdir -p "$containers_state" "$containers_run"
cat >"$containers_state/storage.conf" <<CONF
[storage]
driver = "overlay"
graphroot = "$containers_state/storage"
runroot = "$containers_run/storage"
CONF
cat >"$containers_state/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]
log_driver = "k8s-file"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "$containers_run/libpod"
volume_path = "$containers_state/volumes"

[network]
network_config_dir = "$containers_state/networks"
CONF
export CONTAINERS_STORAGE_CONF=$containers_state/storage.conf
export CONTAINERS_CONF=$containers_state/containers.conf
# Nothing here may reach a system bus: the sandbox's socket is mounted into pods explicitly.
export DBUS_SYSTEM_BUS_ADDRESS=unix:path=/nonexistent/shutdown-shim-tests/no-bus
