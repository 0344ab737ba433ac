"""tools.models.embedders: image-text embedders chosen by name (:mod:`.factory`) behind one protocol (:mod:`.base`)."""
