# make model: SPIN checks the protocol model in every configuration
# (model/verify.sh); the safe ones must verify, the unsafe ones must still
# produce their counterexample.
.PHONY: model
model: deps
	@echo "== spin model (model/verify.sh)"
	@./model/verify.sh
