# The README's two commands: `make run` and `make test`; `make test-fast`
# runs the tests that load no model and start no server (a few minutes).
.PHONY: setup run test test-fast
setup:
	bash scripts/setup.sh
run:
	bash scripts/run.sh
test:
	bash scripts/test.sh
test-fast:
	bash scripts/test.sh -m "not live and not slow"
