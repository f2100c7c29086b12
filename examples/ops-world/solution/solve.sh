#!/bin/bash
# The oracle: the known-good answer, run as the agent runs (`denv verify ENV --oracle ./solution`,
# and Harbor's oracle agent on `denv export --harbor`'s task).
set -euo pipefail
psql -Atc "select count(*) from orders where status = 'failed' and total_cents > 50000" > /home/ubuntu/answer.txt
