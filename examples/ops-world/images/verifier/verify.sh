#!/bin/bash
# ops-world grader.
#
# Input: the collected answer, mounted read-only by denv verify under $DENV_COLLECT_DIR (default
# /collect) at its original path: $DENV_COLLECT_DIR/home/ubuntu/answer.txt.
# Output (denv's reward convention): the reward, a number in [0, 1], alone on the last line of
# stdout; it is also written to $DENV_REWARD_FILE when that is set. Exit 0 when grading ran.
#
# The expected answer is fixed because the seed data is generated deterministically; it is not
# read back from the database, which the agent could have changed.
set -u
EXPECTED=9993
collect=${DENV_COLLECT_DIR:-/collect}
answer_file="$collect/home/ubuntu/answer.txt"
reward=0
if [ -f "$answer_file" ] && [ ! -L "$answer_file" ]; then
  answer=$(head -c 64 "$answer_file" | tr -d '[:space:]')
  echo "answer: ${answer:-<empty>} expected: $EXPECTED"
  [ "$answer" = "$EXPECTED" ] && reward=1
else
  echo "no answer at $answer_file"
fi
[ -n "${DENV_REWARD_FILE:-}" ] && echo "$reward" >"$DENV_REWARD_FILE"
echo "$reward"
