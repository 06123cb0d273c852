# The rehearsal's own -var-file, applied after terraform.tfvars.example
# (scripts/rehearse; docs/REHEARSAL.md): the scale-set shape with
# two relays behind the load balancer, and the benchmark VM. Nothing here
# is specific to the rehearsal machine: these are values an operator sets.
relay_count         = 2
bench_source_region = "australiaeast"
# The VMs here have this machine's memory (24 GB), not a D16ds_v5's 64 GiB:
# relay-server refuses to start when its memory bound exceeds 90 % of RAM,
# so size the VM and the budget as an operator of a small relay would.
vm_size             = "Standard_D4ds_v5" # 16 GiB
relay_memory_budget = "2GiB"
# The download stage: a container of results another job wrote that the
# relays may read, and a token that uploads to `uploads` and reads both
# (and may not delete: the sync stage's refused delete). The sync stage: a
# token that may also delete in `uploads` (relay-client sync --delete).
download_containers = ["results"]
tokens = {
  rehearsal-reader = ["uploads:rw", "results:r"]
  rehearsal-syncer = ["uploads:rwd"]
}
