# make model: SPIN checks the protocol model in every configuration
# (model/verify.sh); the safe ones must verify, the unsafe ones must still
# produce their counterexample. make test runs all but the LONG rows (over
# 25 seconds on one core, model/verify.sh); make model-long runs those (CI
# runs it after make test).
.PHONY: model model-long
model: deps
	@echo "== spin model (model/verify.sh, SET=quick)"
	@SET=quick ./model/verify.sh

model-long: deps
	@echo "== spin model, the long rows (model/verify.sh, SET=long)"
	@SET=long ./model/verify.sh
