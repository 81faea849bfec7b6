# The README's two commands: `make run` and `make test`.
.PHONY: setup run test
setup:
	bash scripts/setup.sh
run:
	bash scripts/run.sh
test:
	bash scripts/test.sh
