package main

import (
	"crypto/rand"
	"encoding/json"
	"net/http"
	"time"
)

// GET /v1/models and the answers to paths the API does not serve, in
// vLLM's formats: ModelList, ModelCard and ModelPermission of
// vllm/entrypoints/openai/engine/protocol.py (field order read from the
// search tool's store, commit not recorded), filled as
// OpenAIServingModels.show_available_models fills them
// (vllm/entrypoints/openai/models/serving.py at
// 4fe4500477d5bbf2c2a467adacc60f7d215cd655: the served model with
// max_model_len, then each LoRA adapter with its path as root and the base
// model as parent). The {"detail": ...} body of an unknown path (404) or
// method (405) is FastAPI's default, inferred, not read in vLLM.

type (
	modelList struct {
		Object string      `json:"object"`
		Data   []modelCard `json:"data"`
	}
	modelCard struct {
		ID          string            `json:"id"`
		Object      string            `json:"object"`
		Created     int64             `json:"created"`
		OwnedBy     string            `json:"owned_by"`
		Root        *string           `json:"root"`
		Parent      *string           `json:"parent"`
		MaxModelLen *int64            `json:"max_model_len"`
		Permission  []modelPermission `json:"permission"`
	}
	modelPermission struct {
		ID                 string  `json:"id"`
		Object             string  `json:"object"`
		Created            int64   `json:"created"`
		AllowCreateEngine  bool    `json:"allow_create_engine"`
		AllowSampling      bool    `json:"allow_sampling"`
		AllowLogprobs      bool    `json:"allow_logprobs"`
		AllowSearchIndices bool    `json:"allow_search_indices"`
		AllowView          bool    `json:"allow_view"`
		AllowFineTuning    bool    `json:"allow_fine_tuning"`
		Organization       string  `json:"organization"`
		Group              *string `json:"group"`
		IsBlocking         bool    `json:"is_blocking"`
	}
)

// models is the model list of an instance serving model and the example's
// LoRA adapters.
func models(model string, now time.Time) modelList {
	card := func(id string, root, parent *string, maxLen *int64) modelCard {
		return modelCard{ID: id, Object: "model", Created: now.Unix(), OwnedBy: "vllm", Root: root, Parent: parent,
			MaxModelLen: maxLen, Permission: []modelPermission{{ID: "modelperm-" + rand.Text(), Object: "model_permission",
				Created: now.Unix(), AllowSampling: true, AllowLogprobs: true, AllowView: true, Organization: "*"}}}
	}
	list := modelList{Object: "list", Data: []modelCard{card(model, new(model), nil, new(int64(maxModelLen)))}}
	for _, a := range loraAdapters {
		list.Data = append(list.Data, card(a, new("/adapters/"+a), new(model), nil))
	}
	return list
}

// writeModels answers GET /v1/models.
func writeModels(w http.ResponseWriter, model string) {
	writeJSON(w, http.StatusOK, models(model, time.Now()))
}

// writeJSON writes v as a JSON answer with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// withNotFound serves mux, answering the requests none of its routes takes
// as FastAPI does: 405 for a served path asked with another method, 404
// for any other path.
func withNotFound(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pattern := mux.Handler(probe); pattern != "" {
				writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"detail": "Method Not Allowed"})
				return
			}
		}
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
	})
}
